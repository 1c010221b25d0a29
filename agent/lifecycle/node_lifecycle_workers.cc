// NodeLifecycle's worker-side events: exits, restarts, signals, the drain and the report, and the
// deadlines (node_lifecycle.h). The coordinator-side events are in node_lifecycle.cc.
#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/lifecycle/node_lifecycle_internal.h"

namespace dgt::agent {
namespace {

using lifecycle_internal::Level;
using lifecycle_internal::Log;

LifecycleAction Record(const WorkerExit& e, bool recovered) {
  return actions::RecordFailure{e, recovered};
}

LifecycleAction Publish(const WorkerExit& e, bool restart, int restart_count) {
  return actions::PublishFailure{e, restart, restart_count};
}

// Whether `e` was declared hung before `first`, itself killed as hung.
bool DeclaredHungBefore(const WorkerExit& e, const WorkerExit& first) {
  return e.hang_order > 0 && first.hang_order > 0 && e.hang_order < first.hang_order;
}

// Signals that are forwarded without stopping the job (schedulers use them to announce a
// preemption; the workers decide what to do).
bool IsNotifySignal(int sig) { return sig == SIGUSR1 || sig == SIGUSR2; }

}  // namespace

LifecycleActions NodeLifecycle::OnWorkerExit(const WorkerExit& e, int alive, absl::Time now) {
  LifecycleActions out;
  if (!e.succeeded()) {
    // Failures observed before this node started stopping on its own (not ones it caused).
    const bool own_failure =
        state_ == NodeState::kRunning && !remote_outcome_ && stop_signal_ == 0 && tracker_;
    if (own_failure) {
      const RestartTracker::Decision d = tracker_->OnFailure(e.rank, e.attempt);
      const std::string who =
          absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, ") ", e.Describe());
      switch (d.action) {
        case RestartTracker::Action::kRestartRank:
          out.push_back(Log(Level::kWarn, absl::StrCat(who, "; restarting it")));
          // Recovered: not a failure of the run, but the summary names it if a later one is.
          out.push_back(Record(e, /*recovered=*/true));
          // Publishes, then restarts (OnFailurePublished).
          ++pending_restarts_;
          out.push_back(Publish(e, /*restart=*/true, d.restart_count));
          break;
        case RestartTracker::Action::kDropRank:
          // Tolerated: not part of a failure summary.
          out.push_back(Log(Level::kWarn,
                            absl::StrCat(who, "; continuing without it (--recovery-mode=shrink, ",
                                         tracker_->restarts(),
                                         " of --max-restarts=", options_.max_restarts, ")")));
          out.push_back(Publish(e, /*restart=*/false, d.restart_count));
          break;
        case RestartTracker::Action::kRestartGroup: {
          // Static backend, one node: no rendezvous, the local node restarts alone.
          out.push_back(Record(e, /*recovered=*/false));
          out.push_back(Log(Level::kWarn, absl::StrCat(who, "; restarting every worker (restart ",
                                                       tracker_->restarts(), " of --max-restarts=",
                                                       options_.max_restarts, ")")));
          state_ = NodeState::kRestarting;
          next_restart_count_ = d.restart_count;
          out.push_back(actions::StopWorkers{});
          break;
        }
        case RestartTracker::Action::kReportToRendezvous:
          // Group restarts are new rendezvous rounds for every node: stop this node's workers
          // and report; the service answers with a restart round or the run's end.
          first_failure_ = e;
          out.push_back(Record(e, /*recovered=*/false));
          out.push_back(
              Log(Level::kError, absl::StrCat(who,
                                              "; stopping the other workers and reporting to the "
                                              "rendezvous")));
          Stop(&out);
          break;
        case RestartTracker::Action::kFail:
          first_failure_ = e;
          out.push_back(Record(e, /*recovered=*/false));
          out.push_back(Log(Level::kError,
                            absl::StrCat(who, "; ", d.reason, "; stopping the other workers")));
          Stop(&out);
          break;
        case RestartTracker::Action::kIgnore:
          out.push_back(Record(e, /*recovered=*/false));
          break;
      }
    } else {
      if (first_failure_ && DeclaredHungBefore(e, *first_failure_)) {
        // Ranks declared hung together are killed together and reaped in any order: the one
        // declared first is the root cause (HangMonitor's order), and the others stay named.
        first_failure_ = e;
        out.push_back(actions::RecordFailure{e, /*recovered=*/false, /*root_cause=*/true});
      } else if (first_failure_ &&
                 (e.hang_order > 0 || (e.signal != SIGTERM && e.signal != SIGKILL))) {
        // Failed on its own (or was declared hung) while the others stopped.
        out.push_back(Record(e, /*recovered=*/false));
      }
      if (state_ == NodeState::kRunning) Stop(&out);
    }
  }
  if (alive > 0 || pending_restarts_ > 0 || spawning_) return out;
  LifecycleActions rest = AllWorkersExited(now);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

bool NodeLifecycle::OnFailurePublished(bool group_current) {
  --pending_restarts_;
  return state_ == NodeState::kRunning && group_current && !remote_outcome_ && stop_signal_ == 0;
}

LifecycleActions NodeLifecycle::OnRankRestartFailed(const WorkerExit& e) {
  LifecycleActions out;
  first_failure_ = e;
  out.push_back(Record(e, /*recovered=*/false));
  Stop(&out);
  return out;
}

LifecycleActions NodeLifecycle::OnWorkersIdle(int alive, absl::Time now) {
  if (state_ == NodeState::kDone || alive > 0 || pending_restarts_ > 0 || spawning_) return {};
  return AllWorkersExited(now);
}

LifecycleActions NodeLifecycle::OnSpawnDone(int alive, absl::Time now) {
  spawning_ = false;
  // Every worker started in earlier batches may have exited while later ones were started (their
  // exits waited for this). Not once the round is over otherwise (waiting for a round, done).
  const bool round_active = state_ == NodeState::kRunning || state_ == NodeState::kStopping ||
                            state_ == NodeState::kRestarting || state_ == NodeState::kRerounding;
  if (round_active && alive == 0 && pending_restarts_ == 0) return AllWorkersExited(now);
  return {};
}

LifecycleActions NodeLifecycle::AllWorkersExited(absl::Time now) {
  LifecycleActions out;
  if (state_ == NodeState::kRerounding) {
    out.push_back(actions::KillWorkers{});
    if (pending_) {
      out.push_back(actions::ApplyAssignment{*pending_});
      pending_.reset();
    } else {
      state_ = NodeState::kWaitingForRound;  // Stopped by the service; the next round will come.
    }
    return out;
  }
  if (state_ == NodeState::kRestarting) {
    out.push_back(actions::KillWorkers{});
    LifecycleActions start = StartRound(next_restart_count_);
    out.insert(out.end(), start.begin(), start.end());
    return out;
  }
  if (state_ == NodeState::kAwaitingOutcome || state_ == NodeState::kDone) return out;
  state_ = NodeState::kAwaitingOutcome;
  // Leftover grandchildren of the workers die with their groups; their output pipes then close.
  out.push_back(actions::KillWorkers{});
  // Bound the wait for output: a worker's descendant that left its process group may hold the
  // pipes open forever.
  drain_pending_ = true;
  drain_deadline_ = now + options_.drain_timeout;
  out.push_back(actions::WatchDrain{});
  return out;
}

LifecycleActions NodeLifecycle::OnDrained() {
  if (!drain_pending_) return {};
  drain_pending_ = false;
  drain_deadline_.reset();
  if (state_ != NodeState::kAwaitingOutcome) return {};
  LifecycleActions out;
  if (options_.backend == RestartBackend::kStatic) {
    // No service: report to the static coordinator; its answer is OnStaticOutcome. The others
    // fail naming this node and the signal, not as if they had been signalled.
    actions::Report report;
    if (stop_signal_ != 0 && signal_decides_) {
      // A health check's leave is this node's own failure, not a signal the others name.
      report.signal = unhealthy_ ? 0 : stop_signal_;
      report.unhealthy = unhealthy_.has_value();
      report.exit_status = StoppedStatus();
      report.text = StoppedText();
    } else {
      // (The message goes with a failure only: the coordinator ignores it with status 0.)
      report.exit_status = first_failure_ ? first_failure_->ExitStatus() : 0;
      report.failure = first_failure_;
      if (first_failure_) report.text = DescribeFailure(*first_failure_);
    }
    out.push_back(std::move(report));
    return out;
  }
  if (stop_signal_ != 0) {
    // No report: the session ends with this agent, and the service treats the node as lost
    // (the others go on in a new round if enough nodes remain). A signal from outside decides
    // this node's status over whatever the service said while its workers stopped.
    return FinishSignalled();
  }
  if (leave_) {
    out.push_back(actions::MarkDone{leave_->first});
    out.push_back(actions::Linger{leave_->first, leave_->second});
    return out;
  }
  if (marks_failure_ && !first_failure_ && !remote_outcome_) {
    // Stopped for another node's failure: this node's workers did not fail. Its mark says 0, so
    // that the marks name the failed node; the outcome then comes from the marks (or from the
    // service, back: it has the failed node's report).
    out.push_back(actions::MarkDone{kExitSuccess});
    out.push_back(actions::PollMarks{});
    return out;
  }
  if (remote_outcome_) return OnRunFinished(*remote_outcome_);
  // Report; the service answers with the run's end or a new round (a restart after a failure).
  actions::Report report;
  report.exit_status = first_failure_ ? first_failure_->ExitStatus() : kExitSuccess;
  report.failure = first_failure_;
  out.push_back(std::move(report));
  return out;
}

LifecycleActions NodeLifecycle::OnSignal(int sig, bool workers_started) {
  LifecycleActions out;
  const std::string name = SignalName(sig);
  if (IsNotifySignal(sig)) {
    if (workers_started && (state_ == NodeState::kRunning || state_ == NodeState::kRestarting ||
                            state_ == NodeState::kStopping)) {
      out.push_back(
          Log(Level::kInfo, absl::StrCat("received ", name, "; forwarding it to the workers")));
      out.push_back(actions::ForwardSignal{sig});
    }
    return out;
  }
  if (state_ == NodeState::kJoining || !workers_started) {
    return Finish(128 + sig, absl::StrCat("stopped by ", name, " before workers started"));
  }
  // The service stopped this node's workers (another node was lost) and no new round came yet: a
  // scheduler's cancel (scancel, a pod deletion) of every node at once often lands here.
  if (state_ == NodeState::kWaitingForRound) {
    return Finish(128 + sig, absl::StrCat("stopped by ", name));
  }
  if (state_ == NodeState::kDone) return out;
  if (state_ == NodeState::kAwaitingOutcome) {
    // This node's workers are gone already; only the rest of the run was awaited. A scheduler's
    // cancel (scancel, Azure ML) must not wait for other nodes or the finish timeout. A status
    // decided before the signal (node rank 0 keeping its store, this node's failed worker, the
    // run's failure learned already, the first signal) stays.
    if (linger_) return Finish(linger_->exit_status, linger_->message);
    if (stop_signal_ == 0) {
      stop_signal_ = sig;
      signal_decides_ = !first_failure_ && !leave_ && !RemoteFailureCameFirst();
    }
    if (!signal_decides_ || stop_signal_ != sig) return FinishSignalled();
    return Finish(128 + sig, absl::StrCat("stopped by ", name,
                                          " after this node's workers exited, before the run's "
                                          "outcome was known"));
  }
  if (stop_signal_ != 0) {
    out.push_back(
        Log(Level::kWarn, absl::StrCat("second signal ", name, "; killing the workers now")));
    out.push_back(actions::KillWorkers{});
    return out;
  }
  stop_signal_ = sig;
  signal_decides_ = !first_failure_ && !leave_ && !RemoteFailureCameFirst();
  out.push_back(actions::InterruptCoordinator{});  // Node rank 0 stops waiting for the others.
  out.push_back(Log(Level::kWarn, absl::StrCat("received ", name,
                                               "; forwarding it to the workers and stopping "
                                               "(SIGKILL after ",
                                               options_.stop_timeout_s, " s)")));
  // The workers get the signal itself, then SIGKILL after --stop-timeout (torchrun forwards the
  // signal it received as the death signal).
  Stop(&out, sig);
  return out;
}

LifecycleActions NodeLifecycle::OnHealthFailed(const std::string& message, bool workers_started) {
  LifecycleActions out;
  if (state_ == NodeState::kDone) return out;
  if (state_ == NodeState::kJoining || state_ == NodeState::kWaitingForRound || !workers_started) {
    return Finish(kExitNodeUnhealthy, message);
  }
  if (state_ == NodeState::kAwaitingOutcome) {
    out.push_back(
        Log(Level::kWarn, absl::StrCat(message, "; this node's workers are done already")));
    return out;
  }
  if (stop_signal_ != 0 || leave_ || remote_outcome_ || first_failure_) {
    // Another cause stops this node already; it decides the status.
    out.push_back(Log(Level::kWarn, absl::StrCat(message, "; this node is stopping already")));
    return out;
  }
  unhealthy_ = message;
  stop_signal_ = SIGTERM;
  signal_decides_ = true;  // The first cause: no other was there (checked above).
  pending_.reset();
  out.push_back(actions::InterruptCoordinator{});  // Node rank 0 stops waiting for the others.
  out.push_back(Log(Level::kError, absl::StrCat(message,
                                                "; this node leaves the run: stopping its workers "
                                                "(SIGKILL after ",
                                                options_.stop_timeout_s, " s)")));
  // The others go on (or fail) now, not after this node's workers are gone: with the session
  // open, their collectives would fail first, as worker failures.
  out.push_back(actions::LeaveSession{});
  if (state_ == NodeState::kRunning) {
    Stop(&out);
  } else {
    state_ = NodeState::kStopping;  // kRestarting, kRerounding: the workers stop already.
  }
  return out;
}

LifecycleActions NodeLifecycle::OnTick(absl::Time now) {
  LifecycleActions out;
  if (join_deadline_ && now >= *join_deadline_) {
    join_deadline_.reset();
    if (state_ == NodeState::kJoining) {
      return Finish(kExitJoinTimeout,
                    absl::StrCat("rendezvous for run '", options_.run_id,
                                 "' did not complete within ", options_.join_timeout_s, " s (",
                                 options_.join_timeout_flag, "): ", joined_nodes_, " of at least ",
                                 options_.min_nodes, " node(s) joined"));
    }
  }
  if (round_wait_deadline_ && now >= *round_wait_deadline_) {
    round_wait_deadline_.reset();
    if (state_ == NodeState::kWaitingForRound) {
      return Finish(kExitJoinTimeout,
                    absl::StrCat("run '", options_.run_id, "' got no new round within ",
                                 options_.join_timeout_s, " s after its workers were stopped"));
    }
  }
  if (drain_deadline_ && now >= *drain_deadline_) return OnDrained();
  return out;
}

std::optional<absl::Time> NodeLifecycle::NextDeadline() const {
  std::optional<absl::Time> next;
  for (const auto& d : {join_deadline_, round_wait_deadline_, drain_deadline_}) {
    if (d && (!next || *d < *next)) next = d;
  }
  return next;
}

}  // namespace dgt::agent
