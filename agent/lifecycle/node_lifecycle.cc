#include "agent/lifecycle/node_lifecycle.h"

#include <signal.h>
#include <string.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "agent/lifecycle/node_lifecycle_internal.h"

namespace dgt::agent {
namespace {

using lifecycle_internal::Level;
using lifecycle_internal::Log;

bool WorkersOfRound(NodeState s) {
  return s == NodeState::kRunning || s == NodeState::kRestarting || s == NodeState::kStopping ||
         s == NodeState::kRerounding;
}

// Each action's DebugString.
struct Describe {
  std::string operator()(const actions::Log& a) const {
    static constexpr const char* kLevels[] = {"debug", "info", "warn", "error"};
    return absl::StrCat("Log(", kLevels[static_cast<int>(a.level)], "): ", a.text);
  }
  std::string operator()(const actions::StartRound& a) const {
    return absl::StrCat("StartRound(", a.restart_count, a.replacing ? ", replacing" : "", ")");
  }
  std::string operator()(const actions::ApplyAssignment& a) const {
    return absl::StrCat("ApplyAssignment(",
                        a.assignment ? absl::StrCat("round ", a.assignment->round) : "static",
                        a.keep_workers ? ", keep workers" : "", ")");
  }
  std::string operator()(const actions::StopWorkers& a) const {
    return absl::StrCat("StopWorkers(", Signal(a.signal), ")");
  }
  std::string operator()(const actions::KillWorkers&) const { return "KillWorkers"; }
  std::string operator()(const actions::ForwardSignal& a) const {
    return absl::StrCat("ForwardSignal(", Signal(a.signal), ")");
  }
  std::string operator()(const actions::RecordFailure& a) const {
    return absl::StrCat("RecordFailure(rank ", a.exit.rank, a.recovered ? ", recovered" : "",
                        a.root_cause ? ", root cause" : "", ")");
  }
  std::string operator()(const actions::ClearFailures&) const { return "ClearFailures"; }
  std::string operator()(const actions::PublishFailure& a) const {
    return absl::StrCat("PublishFailure(rank ", a.exit.rank, a.restart ? ", restart " : ", drop ",
                        a.restart_count, ")");
  }
  std::string operator()(const actions::InterruptCoordinator&) const {
    return "InterruptCoordinator";
  }
  std::string operator()(const actions::LeaveSession&) const { return "LeaveSession"; }
  std::string operator()(const actions::WatchDrain&) const { return "WatchDrain"; }
  std::string operator()(const actions::Report& a) const {
    return absl::StrCat("Report(", a.exit_status,
                        a.failure ? absl::StrCat(", rank ", a.failure->rank) : "",
                        a.signal != 0 ? absl::StrCat(", ", SignalName(a.signal)) : "",
                        a.unhealthy ? ", unhealthy" : "", a.text.empty() ? "" : ", ", a.text, ")");
  }
  std::string operator()(const actions::MarkDone& a) const {
    return absl::StrCat("MarkDone(", a.exit_status, ")");
  }
  std::string operator()(const actions::PollMarks&) const { return "PollMarks"; }
  std::string operator()(const actions::PollMarksLater&) const { return "PollMarksLater"; }
  std::string operator()(const actions::FinishFromMarks& a) const {
    return WithStatus("FinishFromMarks", a.exit_status, a.text);
  }
  std::string operator()(const actions::Linger& a) const {
    return WithStatus("Linger", a.exit_status, a.text);
  }
  std::string operator()(const actions::Reconnect&) const { return "Reconnect"; }
  std::string operator()(const actions::Finish& a) const {
    return WithStatus("Finish", a.exit_status, a.text);
  }

  static std::string Signal(int sig) { return sig == 0 ? "SIGTERM" : SignalName(sig); }
  static std::string WithStatus(const char* name, int exit_status, const std::string& text) {
    return absl::StrCat(name, "(", exit_status, text.empty() ? "" : ", ", text, ")");
  }
};

}  // namespace

std::string DebugString(const LifecycleAction& action) { return std::visit(Describe{}, action); }

NodeLifecycle::NodeLifecycle(Options options, const Clock* clock)
    : options_(std::move(options)), clock_(clock) {}

bool NodeLifecycle::GroupRestartLeft() const {
  return options_.restart_policy == RestartPolicy::kGroup && restart_count_ < options_.max_restarts;
}

std::string NodeLifecycle::DescribeFailure(const WorkerExit& e) const {
  return absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, " on node rank ", node_rank_,
                      ", ", options_.advertised_address, ", pid ", e.pid, ") ", e.Describe());
}

void NodeLifecycle::OnJoinSent(absl::Time now) {
  join_deadline_ = now + absl::Seconds(options_.join_timeout_s);
}

void NodeLifecycle::OnProgress(int joined_nodes, bool spare, absl::Time now) {
  joined_nodes_ = joined_nodes;
  if (state_ != NodeState::kJoining) return;
  if (spare) {
    join_deadline_.reset();
  } else if (!join_deadline_) {
    join_deadline_ = now + absl::Seconds(options_.join_timeout_s);
  }
}

void NodeLifecycle::Stop(LifecycleActions* out, int signal) {
  state_ = NodeState::kStopping;
  out->push_back(actions::StopWorkers{signal});
}

LifecycleActions NodeLifecycle::Finish(int exit_status, const std::string& message) {
  if (state_ == NodeState::kDone) return {};
  state_ = NodeState::kDone;
  join_deadline_.reset();
  round_wait_deadline_.reset();
  drain_deadline_.reset();
  drain_pending_ = false;
  return {actions::Finish{exit_status, message}};
}

int NodeLifecycle::StoppedStatus() const {
  return unhealthy_ ? kExitNodeUnhealthy : 128 + stop_signal_;
}

std::string NodeLifecycle::StoppedText() const {
  return unhealthy_ ? *unhealthy_ : absl::StrCat("stopped by ", SignalName(stop_signal_));
}

bool NodeLifecycle::StoppingForSignal(LifecycleActions* out, const std::string& what,
                                      const std::string& reason) const {
  if (stop_signal_ == 0 || state_ == NodeState::kDone) return false;
  // A signal from outside (scancel, a pod deletion) ends this agent with 128+N once its workers
  // are gone, as torchrun: nothing the service says afterwards (the other nodes, signalled too,
  // are lost) puts it back into waiting for a round.
  out->push_back(
      Log(Level::kInfo, absl::StrCat("ignoring ", what, " from the rendezvous (", reason,
                                     "): this node is stopping (",
                                     unhealthy_ ? "unhealthy" : SignalName(stop_signal_), ")")));
  return true;
}

LifecycleActions NodeLifecycle::OnAssignment(const RoundAssignment& a, int alive, absl::Time now) {
  (void)now;
  LifecycleActions out;
  if (StoppingForSignal(&out, "a new round", a.reason)) return out;
  LifecycleAction apply = actions::ApplyAssignment{a};
  if (a.in_place && state_ == NodeState::kRunning && round_ >= 0 && a.node_rank == node_rank_ &&
      a.node_count == node_count_ && a.restart_count == restart_count_) {
    // A spare took a lost node's place: this node's workers go on, and the spare's join as the
    // lost ranks' replacements (in-place recovery across nodes).
    out.push_back(
        Log(Level::kInfo, absl::StrCat("run '", options_.run_id, "' moves to round ", a.round, " (",
                                       a.reason, "); this node's workers go on")));
    round_ = a.round;
    out.push_back(actions::ApplyAssignment{a, /*keep_workers=*/true});
    return out;
  }
  switch (state_) {
    case NodeState::kJoining:
      join_deadline_.reset();
      out.push_back(std::move(apply));
      return out;
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kRerounding:
      // A new round (a node left or came, or a restart after a failure): stop this round's
      // workers; the new round starts once they are gone. Failures seen while they stop belong
      // to the old round.
      out.push_back(
          Log(Level::kWarn, absl::StrCat("run '", options_.run_id, "' moves to round ", a.round,
                                         " (", a.reason, "); stopping this node's workers")));
      pending_ = a;
      first_failure_.reset();
      out.push_back(actions::ClearFailures{});
      if (state_ != NodeState::kRerounding && state_ != NodeState::kStopping) {
        out.push_back(actions::StopWorkers{});
      }
      state_ = NodeState::kRerounding;
      if (alive == 0) {
        pending_.reset();
        out.push_back(actions::KillWorkers{});
        out.push_back(std::move(apply));
      }
      return out;
    case NodeState::kWaitingForRound:
    case NodeState::kAwaitingOutcome:
      join_deadline_.reset();
      round_wait_deadline_.reset();
      drain_deadline_.reset();
      drain_pending_ = false;
      first_failure_.reset();
      out.push_back(actions::ClearFailures{});
      out.push_back(std::move(apply));
      return out;
    case NodeState::kDone:
      return out;
  }
  return out;
}

LifecycleActions NodeLifecycle::OnRoundApplied(const RoundAssignment& a) {
  round_ = a.round;
  node_rank_ = a.node_rank;
  node_count_ = a.node_count;
  restart_count_ = a.restart_count;
  // A fresh restart budget for the round's node count.
  RestartTracker::Options restart_options;
  restart_options.policy = options_.restart_policy;
  restart_options.max_restarts = options_.max_restarts;
  restart_options.node_count = a.node_count;
  restart_options.shrink = options_.shrink;
  restart_options.backend = options_.backend;
  tracker_ = std::make_unique<RestartTracker>(restart_options, clock_);
  if (a.in_place) {
    // The other nodes' workers go on and wait for this node's ranks as replacements.
    return StartRound(a.restart_count + 1, /*replacing=*/true);
  }
  return StartRound(a.restart_count);
}

LifecycleActions NodeLifecycle::StartRound(int restart_count, bool replacing) {
  state_ = NodeState::kRunning;
  spawning_ = true;
  return {actions::StartRound{restart_count, replacing}};
}

LifecycleActions NodeLifecycle::OnStop(const std::string& reason, int alive, absl::Time now) {
  LifecycleActions out;
  if (state_ == NodeState::kDone || state_ == NodeState::kJoining) return out;
  if (StoppingForSignal(&out, "a stop of this node's workers", reason)) return out;
  out.push_back(
      Log(Level::kWarn, absl::StrCat("the rendezvous stopped this node's workers: ", reason)));
  first_failure_.reset();
  out.push_back(actions::ClearFailures{});
  pending_.reset();  // A round assigned before the stop is not this node's any more.
  if (alive > 0 && state_ != NodeState::kRerounding) {
    state_ = NodeState::kRerounding;  // Stop; wait for the next assignment once they are gone.
    out.push_back(actions::StopWorkers{});
  } else if (alive == 0) {
    state_ = NodeState::kWaitingForRound;
  }
  round_wait_deadline_ = now + absl::Seconds(options_.join_timeout_s);
  return out;
}

LifecycleActions NodeLifecycle::OnRefused(const std::string& message, bool rejoin, int alive) {
  if (state_ == NodeState::kJoining) {
    return Finish(kExitNotAdmitted,
                  absl::StrCat("the rendezvous service refused this node: ", message));
  }
  if (rejoin) {
    // The run went on without this node while it was away (or the service cannot take its
    // round back): a new agent may join it again, so not "not admitted".
    return LeaveRun(kExitRendezvousUnavailable,
                    absl::StrCat("lost the rendezvous service at ", options_.rdzv_endpoint,
                                 " and could not rejoin run '", options_.run_id, "': ", message),
                    alive);
  }
  return LeaveRun(kExitNotAdmitted,
                  absl::StrCat("the rendezvous service ended the part of node '", options_.node_id,
                               "' in run '", options_.run_id, "': ", message),
                  alive);
}

LifecycleActions NodeLifecycle::LeaveRun(int leave_status, const std::string& leave_message,
                                         int alive) {
  LifecycleActions out;
  if (state_ == NodeState::kDone) return out;
  int exit_status = leave_status;
  std::string message = leave_message;
  if (first_failure_) {
    // This node's failed worker came first: its status is the first cause's (docs/EXIT_CODES.md).
    exit_status = first_failure_->ExitStatus();
    message = absl::StrCat(DescribeFailure(*first_failure_), "; then ", leave_message);
  }
  if (stop_signal_ != 0) {
    // An outside signal stops this node already; its status (128+N) is the one to report.
    out.push_back(
        Log(Level::kInfo, absl::StrCat(message, "; this node is stopping anyway (",
                                       unhealthy_ ? "unhealthy" : SignalName(stop_signal_), ")")));
    return out;
  }
  if ((alive == 0 && pending_restarts_ == 0) || !WorkersOfRound(state_)) {
    out.push_back(actions::Linger{exit_status, message});
    return out;
  }
  leave_ = {exit_status, message};
  // A failed outcome stops restarts and new rounds on this node while its workers stop.
  if (!remote_outcome_) {
    RunOutcome left;
    left.message = message;
    remote_outcome_ = left;
  }
  pending_.reset();
  out.push_back(Log(Level::kError, absl::StrCat(message, "; stopping this node's workers")));
  if (state_ == NodeState::kRunning) {
    Stop(&out);
  } else {
    // kRestarting: no restart now; kRerounding: no next round (the workers are stopping).
    state_ = NodeState::kStopping;
  }
  return out;
}

LifecycleActions NodeLifecycle::OnMarksFailure(int node_rank, int exit_status) {
  LifecycleActions out;
  marks_failure_ = node_rank;
  out.push_back(Log(
      Level::kError,
      absl::StrCat("the workers of node rank ", node_rank, " ended with exit status ", exit_status,
                   " (done marks in the round's store; the rendezvous service is "
                   "unreachable); stopping this node's workers")));
  Stop(&out);
  return out;
}

LifecycleActions NodeLifecycle::OnStaticStarted(bool ok, bool already_exists,
                                                const std::string& message) {
  if (state_ != NodeState::kJoining) return {};
  if (already_exists) return Finish(kExitNotAdmitted, absl::StrCat("static rendezvous: ", message));
  if (!ok) {
    return Finish(kExitRendezvousUnavailable,
                  absl::StrCat("static rendezvous: ", message,
                               " (is node rank 0 running? see --rdzv-connect-timeout)"));
  }
  return {actions::ApplyAssignment{}};
}

LifecycleActions NodeLifecycle::OnStaticRemoteFailure(int exit_status, const std::string& message,
                                                      bool stopped_by_signal) {
  if (state_ == NodeState::kDone) return {};
  RunOutcome outcome;
  outcome.message = message;
  outcome.has_failure = true;
  outcome.exit_code = exit_status;
  outcome.stopped_by_signal = stopped_by_signal;
  if (state_ == NodeState::kAwaitingOutcome) {
    // This node's workers are done and its report is pending: its answer ends the run (node
    // rank 0 learns there that another node did not succeed).
    if (!remote_outcome_) remote_outcome_ = outcome;
    return {};
  }
  return OnRunFinished(outcome);
}

LifecycleActions NodeLifecycle::OnStaticOutcome(bool others_ok, const std::string& message) {
  if (stop_signal_ != 0 && signal_decides_) return FinishSignalled();
  if (first_failure_) return Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
  if (remote_outcome_) return OnRunFinished(*remote_outcome_);
  if (!others_ok) return Finish(1, absl::StrCat("static rendezvous: ", message));
  if (node_rank_ != 0) {
    // Node rank 0 (the store host) learns and reports the run's outcome, not this node.
    return Finish(0, absl::StrCat("this node's workers succeeded (node rank ", node_rank_,
                                  "); node rank 0 reports the run's outcome"));
  }
  return Finish(0, "");
}

LifecycleActions NodeLifecycle::OnRunFinished(const RunOutcome& o) {
  LifecycleActions out;
  switch (state_) {
    case NodeState::kJoining:
      if (o.too_few_nodes) {
        // It waited with the others for MIN nodes that did not come: a join timeout.
        return Finish(kExitJoinTimeout, absl::StrCat("run failed: ", o.message));
      }
      if (o.succeeded) {
        // A hot spare (the service tells waiting nodes a success only while a round ran): the
        // run it stood by for succeeded without it.
        return Finish(kExitSuccess, absl::StrCat("run '", options_.run_id, "' succeeded (",
                                                 o.message, ") without node '", options_.node_id,
                                                 "': it waited as a spare and was not needed"));
      }
      // This node never ran a worker of the run: its failure is not this node's (torchrun:
      // RendezvousClosedError). Services that tell waiting nodes so send an Error.
      return Finish(kExitNotAdmitted,
                    absl::StrCat("run '", options_.run_id, "' ended (",
                                 o.succeeded ? "succeeded" : "failed", ": ", o.message,
                                 ") before node '", options_.node_id, "' was admitted to it"));
    case NodeState::kWaitingForRound:
      // This node's workers were stopped, none failed: the run's root cause gives the status,
      // as for a node awaiting the outcome.
      return RunFinishedWhileAwaiting(o);
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kRerounding:
      if (o.succeeded) return out;  // Cannot happen before this node reported.
      pending_.reset();
      if (!remote_outcome_) {
        // The run has ended (the service says no more): its outcome decides once the workers
        // are gone, with this node's own failure if it had one (RunFinishedWhileAwaiting).
        remote_outcome_ = o;
        if (!first_failure_) {
          out.push_back(
              Log(Level::kError,
                  absl::StrCat(o.too_few_nodes ? "run failed: " : "run failed on another node: ",
                               o.message, "; stopping this node's workers")));
        }
      }
      if (state_ == NodeState::kRunning) Stop(&out);
      // No restart, no next round now: the outcome once the workers are gone.
      if (state_ == NodeState::kRestarting || state_ == NodeState::kRerounding) {
        state_ = NodeState::kStopping;
      }
      return out;
    case NodeState::kAwaitingOutcome:
      return RunFinishedWhileAwaiting(o);
    case NodeState::kDone:
      return out;
  }
  return out;
}

LifecycleActions NodeLifecycle::FinishSignalled() {
  const std::string stopped = absl::StrCat("stopped by ", SignalName(stop_signal_));
  if (!signal_decides_) {
    // The signal only hurried a stop that an earlier cause had begun.
    // (LeaveRun gave leave_ the status of this node's failed worker, if any.)
    if (leave_) return Finish(leave_->first, absl::StrCat(leave_->second, "; then ", stopped));
    if (remote_outcome_ && options_.backend == RestartBackend::kRendezvous) {
      // The service's outcome, with this node's failure if it came first.
      return RunFinishedWhileAwaiting(*remote_outcome_);
    }
    if (first_failure_) {
      return Finish(first_failure_->ExitStatus(),
                    absl::StrCat(DescribeFailure(*first_failure_), "; then ", stopped));
    }
    if (remote_outcome_) {
      const RunOutcome& o = *remote_outcome_;
      const int code = o.signal != 0 ? 128 + o.signal : o.exit_code;
      return Finish(code != 0 ? code : 1,
                    absl::StrCat("run failed: ", o.message, "; then ", stopped));
    }
  }
  return Finish(StoppedStatus(), StoppedText());
}

LifecycleActions NodeLifecycle::RunFinishedWhileAwaiting(const RunOutcome& o) {
  if (stop_signal_ != 0 && signal_decides_) return FinishSignalled();
  if (o.succeeded) return Finish(0, "");
  if (first_failure_ && o.has_failure && o.failed_node_id != options_.node_id) {
    // Another node failed first: that is the run's root cause; this node's failure followed.
    LifecycleActions out;
    out.push_back(Log(Level::kWarn, absl::StrCat("this node's ", DescribeFailure(*first_failure_),
                                                 " followed the root cause on another node")));
    out.push_back(actions::ClearFailures{});
    first_failure_.reset();
    LifecycleActions rest = RunFinishedWhileAwaiting(o);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  }
  if (first_failure_) return Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
  if (o.too_few_nodes) {
    // Too few nodes were left after losing nodes, for the join timeout: retried as a join timeout
    // (docs/EXIT_CODES.md), not a failure of the job's code.
    return Finish(kExitJoinTimeout, absl::StrCat("run failed: ", o.message));
  }
  const int code = o.signal != 0 ? 128 + o.signal : o.exit_code;
  return Finish(code != 0 ? code : 1, absl::StrCat("run failed: ", o.message));
}

}  // namespace dgt::agent
