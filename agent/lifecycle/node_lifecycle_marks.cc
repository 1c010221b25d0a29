// NodeLifecycle's decisions from the round's done marks (node_lifecycle.h, OnMarks): what a node
// learns from them while the rendezvous service is unreachable (docs/RENDEZVOUS.md, "Losing the
// service"), and when node rank 0 stops keeping the round's store.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "agent/lifecycle/node_lifecycle.h"

namespace dgt::agent {
namespace {

LifecycleAction PollLater() { return actions::PollMarksLater{}; }

LifecycleAction FinishFromMarks(int exit_status, std::string text) {
  return actions::FinishFromMarks{exit_status, std::move(text)};
}

}  // namespace

void NodeLifecycle::OnLingerStarted(int exit_status, std::string message, bool wait_for_seen,
                                    absl::Time deadline) {
  state_ = NodeState::kAwaitingOutcome;
  linger_ = LingerPlan{exit_status, std::move(message), wait_for_seen, deadline};
}

LifecycleActions NodeLifecycle::OnMarks(const std::optional<MarksView>& marks, bool service_lost,
                                        absl::Time now, absl::Duration lost_for) {
  if (state_ == NodeState::kDone) return {};
  if (linger_) {
    const bool done =
        marks && marks->all_done && (!linger_->wait_for_seen || marks->seen_by_others);
    if (done || now >= linger_->deadline) return Finish(linger_->exit_status, linger_->message);
    return {PollLater()};
  }
  if (state_ == NodeState::kAwaitingOutcome && service_lost) {
    const std::string unreachable =
        absl::StrCat("the rendezvous service at ", options_.rdzv_endpoint, " is unreachable");
    if (marks && marks->all_succeeded) {
      // Rejoin first: the service (a standby taking over, or the restarted service) may have
      // another node back already, and it fails a run whose nodes do not all rejoin.
      const absl::Duration rejoin_first =
          std::min(options_.rejoin_before_marks, absl::Seconds(options_.reconnect_timeout_s));
      if (lost_for < rejoin_first) return {PollLater()};
      return {FinishFromMarks(kExitSuccess, absl::StrCat("every node of run '", options_.run_id,
                                                         "' succeeded, as the done marks in the "
                                                         "round's store say (",
                                                         unreachable, ")"))};
    }
    // Every node is done and one failed: with no group restart left the service would end the
    // run as failed, so the nodes need not wait out the reconnect window for it. (With a restart
    // left, a service coming back would start one: wait for it.)
    if (marks && marks->all_done && !GroupRestartLeft() &&
        (first_failure_ || marks->first_worker_failure >= 0)) {
      int status = 0;
      std::string message;
      if (first_failure_) {
        // This node's own failure is the one it knows best (its time, its rank).
        status = first_failure_->ExitStatus();
        message = DescribeFailure(*first_failure_);
      } else {
        status = marks->first_worker_failure_status;
        message = absl::StrCat("run '", options_.run_id, "' failed: the workers of node rank ",
                               marks->first_worker_failure, " ended with exit status ", status);
      }
      absl::StrAppend(&message, " (done marks in the round's store; ", unreachable, ")");
      return {FinishFromMarks(status, std::move(message))};
    }
    return {PollLater()};
  }
  if (state_ == NodeState::kRunning && service_lost && !GroupRestartLeft()) {
    const int failed = marks ? marks->first_worker_failure : -1;
    if (failed >= 0 && failed != node_rank_) {
      return OnMarksFailure(failed, marks->first_worker_failure_status);
    }
    return {PollLater()};
  }
  return {};  // The service is back (or this node is not waiting for an outcome).
}

}  // namespace dgt::agent
