// NodeLifecycle's decisions when the rendezvous service goes away (node_lifecycle.h): its
// session ends, and its reconnect window passes. The runtime does the reconnecting and reads the
// done marks; what each outcome means for this node is decided here.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "agent/lifecycle/node_lifecycle.h"

namespace dgt::agent {
namespace {

LifecycleAction Linger(int exit_status, std::string text) {
  return actions::Linger{exit_status, std::move(text)};
}

LifecycleAction Reconnect() { return actions::Reconnect{}; }

}  // namespace

LifecycleActions NodeLifecycle::OnSessionClosed(const SessionEnd& end, int alive) {
  // Stopping for an outside signal: the service is not needed any more (the other nodes, or the
  // agent hosting it, may be going away for the same signal), and the end is 128+N.
  if (stop_signal_ != 0) return {};
  switch (state_) {
    case NodeState::kJoining:
      if (end.refused) {
        return Finish(kExitNotAdmitted,
                      absl::StrCat("the rendezvous session at ", options_.rdzv_endpoint,
                                   " ended before this node was assigned: ", end.error));
      }
      return {Reconnect()};  // The join timeout still bounds the wait for a round.
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kRerounding:
      // After a RunFinished (or a refusal) the service ends the session itself: nothing was lost.
      if (remote_outcome_) return {};
      if (end.host_lost) {
        // c10d-style hosting: the service died with its node (whose agent also served the store
        // as node rank 0, or ran workers of this job), so the job cannot complete.
        return LeaveRun(kExitRendezvousUnavailable, *end.host_lost, alive);
      }
      return {Reconnect()};  // The workers keep running meanwhile.
    case NodeState::kWaitingForRound:
      if (end.host_lost) return Finish(kExitRendezvousUnavailable, *end.host_lost);
      return {Reconnect()};
    case NodeState::kAwaitingOutcome:
      if (end.lingering) return {};  // Decided; node rank 0 only keeps its store a while.
      // The run's outcome came before the session ended (its output drains meanwhile).
      if (remote_outcome_) return {};
      if (end.host_lost) {
        if (first_failure_) {
          return Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
        }
        return Finish(kExitRendezvousUnavailable, *end.host_lost);
      }
      // The run's outcome is not known yet: reconnect (and meanwhile read the done marks).
      return {Reconnect()};
    case NodeState::kDone:
      return {};
  }
  return {};
}

LifecycleActions NodeLifecycle::OnReconnectWindowOver(bool lingering,
                                                      std::optional<MarkedFailure> marked,
                                                      int alive) {
  // Stopping for an outside signal (it came first): its 128+N ends this node once the workers
  // are gone and their output drained.
  if (stop_signal_ != 0 && state_ != NodeState::kDone) return {};
  const std::string lost =
      absl::StrCat("lost the rendezvous service at ", options_.rdzv_endpoint,
                   " and could not reach it again within ", options_.reconnect_timeout_s,
                   " s (--rdzv-conf read_timeout)");
  switch (state_) {
    case NodeState::kJoining:
    case NodeState::kWaitingForRound:
      return Finish(kExitRendezvousUnavailable, lost);
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kRerounding:
      return LeaveRun(kExitRendezvousUnavailable, lost, alive);
    case NodeState::kAwaitingOutcome:
      if (lingering) return {};
      if (marked && !first_failure_) {
        // The failed workers' status, as with the service (the root cause's exit code).
        return {
            Linger(marked->exit_status,
                   absl::StrCat("run '", options_.run_id, "' failed: the workers of node rank ",
                                marked->node_rank, " ended with exit status ", marked->exit_status,
                                " (done marks in the round's store; ", lost, ")"))};
      }
      if (first_failure_) {
        return {Linger(first_failure_->ExitStatus(), DescribeFailure(*first_failure_))};
      }
      // Never "succeeded" for a run whose outcome this node does not know.
      return {Linger(kExitRendezvousUnavailable,
                     absl::StrCat(lost, "; this node's workers succeeded, but the outcome of run '",
                                  options_.run_id, "' is unknown"))};
    case NodeState::kDone:
      return {};
  }
  return {};
}

}  // namespace dgt::agent
