// StaticCoordinator's outcome side (static_coordinator.h): this node's report, the wait for the
// other nodes' done marks, and which nodes are missing when they do not come.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/coord/static_coordinator.h"
#include "agent/coord/static_coordinator_internal.h"
#include "agent/exit_codes.h"
#include "common/logging.h"
#include "common/store_keys.h"

namespace dgt::agent {
namespace {

using static_coordinator_internal::kProbeTimeout;
using static_coordinator_internal::kRequestTimeout;
using static_coordinator_internal::NodeRanks;
using static_coordinator_internal::StoppedBySignal;

}  // namespace

void StaticCoordinator::Report(int exit_status, const std::string& message,
                               std::function<void(absl::Status)> done) {
  Publish(exit_status != 0 ? absl::StrCat(exit_status, " ", message) : "",
          absl::StrCat(exit_status), std::move(done));
}

void StaticCoordinator::ReportStopped(const std::string& signal_name,
                                      std::function<void(absl::Status)> done) {
  // signal_name is SignalName's ("SIGTERM"): StoppedBySignal finds it.
  Publish(absl::StrCat(kExitLauncherError, " node rank ", options_.node_rank, " was stopped by ",
                       signal_name),
          absl::StrCat(kExitLauncherError), std::move(done));
}

void StaticCoordinator::ReportUnhealthy(const std::string& message,
                                        std::function<void(absl::Status)> done) {
  Publish(absl::StrCat(kExitLauncherError, " node rank ", options_.node_rank,
                       " left the run: ", message),
          absl::StrCat(kExitLauncherError), std::move(done));
}

void StaticCoordinator::Publish(const std::string& failed, const std::string& done_value,
                                std::function<void(absl::Status)> done) {
  if (!failed.empty())
    control_->Set(keys::StaticFailedKey(options_.run_id), failed, kRequestTimeout);
  control_->Set(keys::StaticDoneKey(options_.run_id, options_.node_rank), done_value,
                kRequestTimeout);
  if (options_.node_rank != 0 || interrupted_ || peer_lost_) {
    // Ok even when the writes failed: node rank 0 then learns of this node otherwise.
    control_->Flush(kRequestTimeout, [this, done = std::move(done)](const absl::Status&) {
      if (!closing_) done(absl::OkStatus());
    });
    return;
  }
  pending_done_ = std::move(done);
  std::vector<std::string> done_keys;
  done_keys.reserve(options_.node_count);
  for (int n = 0; n < options_.node_count; ++n) {
    done_keys.push_back(keys::StaticDoneKey(options_.run_id, n));
  }
  finish_timer_.expires_after(absl::ToChronoMilliseconds(options_.finish_timeout));
  finish_timer_.async_wait(Guarded([this](boost::system::error_code ec) {
    if (ec || !pending_done_) return;
    DescribeMissing();
  }));
  // The finish timer decides before this deadline (the probe included).
  control_->Wait(done_keys, options_.finish_timeout + 2 * kProbeTimeout,
                 [this](const absl::Status& s) {
                   if (!s.ok())
                     return;  // The connection ended (closing): the timer or Interrupt decides.
                   CheckOthersSucceeded(0);
                 });
}

void StaticCoordinator::CheckOthersSucceeded(int next) {
  if (!pending_done_) return;
  if (next == options_.node_rank) ++next;  // This node's own status is the agent's.
  if (next >= options_.node_count) {
    Complete(absl::OkStatus());
    return;
  }
  // Every done key exists (the WAIT said so): GET is safe on a 1.x server.
  control_->Get(keys::StaticDoneKey(options_.run_id, next), kRequestTimeout,
                [this, next](absl::StatusOr<std::string> v) {
                  if (!pending_done_) return;
                  int status = 0;
                  if (!v.ok()) {
                    Complete(absl::UnavailableError(absl::StrCat(
                        "cannot read node rank ", next, "'s exit status: ", v.status().message())));
                    return;
                  }
                  if (!absl::SimpleAtoi(*v, &status) || status == 0) {
                    CheckOthersSucceeded(next + 1);
                    return;
                  }
                  if (status < 0 || status > 255) status = 1;
                  const std::string what =
                      absl::StrCat("node rank ", next, " did not succeed (exit status ", *v, ")");
                  // Its failure message: the failed key was set before its done key, on the same
                  // connection.
                  control_->Check({keys::StaticFailedKey(options_.run_id)}, kRequestTimeout,
                                  [this, status, what](absl::StatusOr<bool> has) {
                                    if (!pending_done_) return;
                                    if (!has.ok() || !*has) {
                                      on_failure_(status, what, false);
                                      Complete(absl::OkStatus());
                                      return;
                                    }
                                    control_->Get(
                                        keys::StaticFailedKey(options_.run_id), kRequestTimeout,
                                        [this, status, what](absl::StatusOr<std::string> f) {
                                          if (!pending_done_) return;
                                          std::string message = what;
                                          bool stopped = false;
                                          if (f.ok()) {
                                            size_t space = f->find(' ');
                                            if (space != std::string::npos) {
                                              absl::StrAppend(&message, "; reported failure: ",
                                                              f->substr(space + 1));
                                              stopped = StoppedBySignal(f->substr(space + 1));
                                            }
                                          }
                                          on_failure_(status, message, stopped);
                                          Complete(absl::OkStatus());
                                        });
                                  });
                });
}

void StaticCoordinator::Interrupt() {
  interrupted_ = true;
  if (!pending_done_ || !control_) return;
  // This node's own done/failed keys go out first; then nobody is waited for.
  control_->Flush(kRequestTimeout, [this](const absl::Status&) {
    if (!closing_) Complete(absl::CancelledError("stopped waiting for the other nodes (signal)"));
  });
}

void StaticCoordinator::Complete(absl::Status status) {
  if (!pending_done_) return;
  finish_timer_.cancel();
  auto done = std::move(pending_done_);
  pending_done_ = nullptr;
  if (probe_) probe_->Close();
  done(std::move(status));
}

void StaticCoordinator::DescribeMissing() {
  const std::string within =
      absl::StrCat(" within the finish timeout of ", absl::FormatDuration(options_.finish_timeout),
                   " (--join-timeout)");
  // Bounded: the probe gets kProbeTimeout, then the run fails with the general message.
  finish_timer_.expires_after(absl::ToChronoMilliseconds(kProbeTimeout));
  finish_timer_.async_wait(Guarded([this, within](boost::system::error_code ec) {
    if (ec) return;
    Complete(absl::DeadlineExceededError(absl::StrCat("not every node reported", within)));
  }));
  struct Probe {
    int next = 0;
    std::vector<int> never_joined;
    std::vector<int> not_reported;
  };
  auto probe = std::make_shared<Probe>();
  probe_ = NewClient();
  auto step = std::make_shared<std::function<void()>>();
  // `step` holds itself only through the callbacks it hands out, so the chain ends with them.
  std::weak_ptr<std::function<void()>> weak_step = step;
  *step = [this, probe, within, weak_step] {
    auto self = weak_step.lock();
    if (!self || !pending_done_) return;
    if (probe->next == options_.node_count) {
      std::vector<std::string> parts;
      if (!probe->never_joined.empty()) {
        parts.push_back(absl::StrCat(NodeRanks(probe->never_joined), " never joined"));
      }
      if (!probe->not_reported.empty()) {
        parts.push_back(absl::StrCat(NodeRanks(probe->not_reported), " joined but did not finish"));
      }
      if (parts.empty()) parts.emplace_back("not every node reported");
      Complete(absl::DeadlineExceededError(absl::StrCat(absl::StrJoin(parts, "; "), within)));
      return;
    }
    const int n = probe->next++;
    probe_->Check({keys::StaticDoneKey(options_.run_id, n)}, kRequestTimeout,
                  [this, probe, n, self](absl::StatusOr<bool> reported) {
                    if (!reported.ok()) return;  // The probe's deadline decides.
                    if (*reported) {
                      (*self)();
                      return;
                    }
                    probe_->Check(
                        {keys::StaticJoinedKey(options_.run_id, n)}, kRequestTimeout,
                        [probe, n, self](absl::StatusOr<bool> joined) {
                          if (!joined.ok()) return;
                          (*joined ? probe->not_reported : probe->never_joined).push_back(n);
                          (*self)();
                        });
                  });
  };
  probe_->Connect(kProbeTimeout, [step](const absl::Status& s) {
    if (s.ok()) (*step)();
  });
}

}  // namespace dgt::agent
