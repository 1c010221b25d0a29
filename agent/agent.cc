#include "agent/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/agent_internal.h"
#include "agent/exit_codes.h"
#include "agent/log_dir.h"
#include "agent/log_line_prefix.h"
#include "agent/rendezvous_host.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/store_keys.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::agent {

std::string SignalName(int sig) {
  const char* name = sigabbrev_np(sig);
  return name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", sig);
}

namespace {

namespace asio = boost::asio;

// Signals that are forwarded without stopping the job (schedulers use them to announce a
// preemption; the workers decide what to do).
bool IsNotifySignal(int sig) { return sig == SIGUSR1 || sig == SIGUSR2; }

}  // namespace

Agent::Agent(LaunchOptions options)
    : options_(std::move(options)),
      work_(asio::make_work_guard(io_)),
      signals_(io_),
      join_timer_(io_),
      drain_timer_(io_),
      reconnect_timer_(io_),
      marks_timer_(io_),
      tf_timer_(io_) {}

Agent::~Agent() {
  // A connection attempt in flight ends within its (1 s) deadline; its session is closed here,
  // while the loop its callbacks post to still exists.
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_ && reconnect_result_->ok()) (**reconnect_result_)->Close();
    reconnect_result_.reset();
  }
  // Writes this node's last done mark (bounded by the store timeout) before the store goes.
  round_tasks_.reset();
  if (tf_tasks_) tf_tasks_->DropQueued();
  tf_tasks_.reset();
  workers_.reset();
  retired_.clear();
  for (int fd : tf_reservations_) ::close(fd);
  if (log_root_is_temp_ && !log_root_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(log_root_, ec);
  }
  if (session_) session_->Close();
  if (store_) store_->Stop();
  // Quietly: the agent's own last stderr line says how the run ended (docs/EXIT_CODES.md).
  if (embedded_rendezvous_) embedded_rendezvous_->Shutdown(absl::Seconds(1), /*quiet=*/true);
}

void Agent::WaitForSignals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    WaitForSignals();
  });
}

int Agent::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread starts (gRPC, the store): the watchdog is forked from here.
  if (absl::Status s = watchdog_.Start(); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: cannot start the process-group watchdog: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  // A --log-dir that cannot hold logs is a usage error now, not a failure after the round formed.
  if (!options_.log_dir.empty()) {
    if (absl::Status s = CheckLogDir(options_.log_dir); !s.ok()) {
      std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
      return kExitUsage;
    }
  }
  // Signals are taken over only once Prepare() is done: it blocks (connecting to the rendezvous
  // service, up to --rdzv-connect-timeout) before the event loop runs, and a SIGTERM or Ctrl-C
  // then must end dgt-run at once (the default action; nothing was started yet), not be queued.
  if (absl::Status s = Prepare(); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
    // A flag whose value is wrong (--local-addr, --master-addr, --rdzv-token-file) is a usage
    // error, exit 2 like the parser's; an unreachable rendezvous service 69; anything else (a
    // port in use, ...) 1.
    if (s.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
    return prepare_exit_status_;
  }
  for (int sig : options_.signals_to_handle) signals_.add(sig);
  WaitForSignals();
  io_.run();
  return exit_status_;
}

void Agent::OnWorkerExit(const WorkerExit& e) {
  if (!e.succeeded()) {
    // Failures observed before this node started stopping on its own (not ones it caused).
    const bool own_failure = state_ == State::kRunning && !remote_outcome_ && stop_signal_ == 0;
    if (own_failure) {
      RestartTracker::Decision d = restarts_->OnFailure(e.rank, e.attempt);
      failures_.push_back(RecordFailure(e));
      switch (d.action) {
        case RestartTracker::Action::kRestartRank:
          spdlog::warn("dgt-run: rank {} (local rank {}) {}; restarting it", e.rank, e.local_rank,
                       e.Describe());
          // Recovered: not a failure of the run, but the summary names it if a later one is.
          recovered_failures_.push_back(std::move(failures_.back()));
          failures_.pop_back();
          // Publishes, then restarts (on a failed start it stops the others).
          PublishFailure(e, /*restart=*/true, d.restart_count);
          break;
        case RestartTracker::Action::kDropRank:
          spdlog::warn(
              "dgt-run: rank {} (local rank {}) {}; continuing without it "
              "(--recovery-mode=shrink, {} of --max-restarts={})",
              e.rank, e.local_rank, e.Describe(), restarts_->restarts(), options_.max_restarts);
          failures_.pop_back();  // Tolerated: not part of a failure summary.
          PublishFailure(e, /*restart=*/false, d.restart_count);
          break;
        case RestartTracker::Action::kRestartGroup:
          // Static backend, one node: no rendezvous, the local node restarts alone.
          spdlog::warn(
              "dgt-run: rank {} (local rank {}) {}; restarting every worker "
              "(restart {} of --max-restarts={})",
              e.rank, e.local_rank, e.Describe(), restarts_->restarts(), options_.max_restarts);
          state_ = State::kRestarting;
          next_restart_count_ = d.restart_count;
          workers_->Stop(absl::Seconds(options_.stop_timeout_s));
          break;
        case RestartTracker::Action::kReportToRendezvous:
          // Group restarts are new rendezvous rounds for every node: stop this node's
          // workers and report; the service answers with a restart round or the run's end.
          first_failure_ = e;
          spdlog::error(
              "dgt-run: rank {} (local rank {}) {}; stopping the other workers "
              "and reporting to the rendezvous",
              e.rank, e.local_rank, e.Describe());
          StopWorkers();
          break;
        case RestartTracker::Action::kFail:
          first_failure_ = e;
          spdlog::error("dgt-run: rank {} (local rank {}) {}; {}; stopping the other workers",
                        e.rank, e.local_rank, e.Describe(), d.reason);
          StopWorkers();
          break;
        case RestartTracker::Action::kIgnore:
          break;
      }
    } else {
      if (first_failure_ && e.signal != SIGTERM && e.signal != SIGKILL) {
        failures_.push_back(RecordFailure(e));  // Failed on its own while the others stopped.
      }
      if (state_ == State::kRunning) StopWorkers();
    }
  }
  if (workers_->alive() > 0 || pending_restarts_ > 0 || spawning_) return;
  OnAllWorkersExited();
}

void Agent::OnAllWorkersExited() {
  if (state_ == State::kRerounding) {
    workers_->KillAll();
    if (pending_assignment_) {
      rdzv_v1::Assignment a = *pending_assignment_;
      pending_assignment_.reset();
      ApplyAssignment(a);
    } else {
      state_ = State::kWaitingForRound;  // Stopped by the service; the next round will come.
    }
    return;
  }
  if (state_ == State::kRestarting) {
    workers_->KillAll();
    StartRound(next_restart_count_);
    return;
  }
  AfterWorkersExited();
}

void Agent::StopWorkers() {
  state_ = State::kStopping;
  workers_->Stop(absl::Seconds(options_.stop_timeout_s));
}

void Agent::OnSignal(int sig) {
  const std::string name = SignalName(sig);
  if (IsNotifySignal(sig)) {
    if (workers_ &&
        (state_ == State::kRunning || state_ == State::kRestarting || state_ == State::kStopping)) {
      spdlog::info("dgt-run: received {}; forwarding it to the workers", name);
      workers_->Signal(sig);
    }
    return;
  }
  if (state_ == State::kJoining || !workers_ || state_ == State::kWaitingForRound) {
    Finish(128 + sig, absl::StrCat("stopped by ", name, " before workers started"));
    return;
  }
  if (state_ == State::kDone) return;
  if (state_ == State::kAwaitingOutcome) {
    // This node's workers are gone already; only the rest of the run was awaited. A scheduler's
    // cancel (scancel, Azure ML) must not wait for other nodes or the finish timeout.
    Finish(128 + sig, absl::StrCat("stopped by ", name,
                                   " after this node's workers exited, before the run's outcome "
                                   "was known"));
    return;
  }
  if (stop_signal_ != 0) {
    spdlog::warn("dgt-run: second signal {}; killing the workers now", name);
    workers_->KillAll();
    return;
  }
  stop_signal_ = sig;
  if (static_) static_->Interrupt();  // Node rank 0 stops waiting for the other nodes.
  spdlog::warn(
      "dgt-run: received {}; forwarding it to the workers and stopping (SIGKILL after "
      "{} s)",
      name, options_.stop_timeout_s);
  state_ = State::kStopping;
  // The workers get the signal itself, then SIGKILL after --stop-timeout (torchrun forwards
  // the signal it received as the death signal).
  workers_->Stop(absl::Seconds(options_.stop_timeout_s), sig);
}

void Agent::AfterWorkersExited() {
  if (state_ == State::kAwaitingOutcome || state_ == State::kDone) return;
  state_ = State::kAwaitingOutcome;
  // Leftover grandchildren of the workers die with their groups; their output pipes then close.
  workers_->KillAll();
  auto report = [this] {
    drain_timer_.cancel();
    if (state_ != State::kAwaitingOutcome) return;
    if (static_) {
      const int own = stop_signal_ != 0 ? 128 + stop_signal_
                                        : (first_failure_ ? first_failure_->ExitStatus() : 0);
      std::string what = first_failure_ ? DescribeFailure(*first_failure_)
                                        : absl::StrCat("stopped by ", SignalName(stop_signal_));
      auto outcome = [this](const absl::Status& others) {
        if (stop_signal_ != 0) {
          Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
        } else if (first_failure_) {
          Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
        } else if (remote_outcome_) {
          OnRunFinished(*remote_outcome_);
        } else if (!others.ok()) {
          Finish(1, absl::StrCat("static rendezvous: ", others.message()));
        } else if (assignment_.node_rank != 0) {
          // Node rank 0 (the store host) learns and reports the run's outcome, not this node.
          Finish(0, absl::StrCat("this node's workers succeeded (node rank ", assignment_.node_rank,
                                 "); node rank 0 reports the run's outcome"));
        } else {
          Finish(0, "");
        }
      };
      if (stop_signal_ != 0) {
        // The others fail naming this node and the signal, not as if they had been signalled.
        static_->ReportStopped(SignalName(stop_signal_), std::move(outcome));
      } else {
        static_->Report(own, what, std::move(outcome));
      }
      return;
    }
    if (stop_signal_ != 0) {
      // No report: the session ends with this agent, and the service treats the node as lost
      // (the others go on in a new round if enough nodes remain). A signal from outside decides
      // this node's status over whatever the service said while its workers stopped.
      Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
      return;
    }
    if (leave_) {
      MarkDone(leave_->first);
      FinishLinger(leave_->first, leave_->second);
      return;
    }
    if (marks_failure_ && !first_failure_ && !remote_outcome_) {
      // Stopped for another node's failure: this node's workers did not fail. Its mark says 0,
      // so that the marks name the failed node; the outcome then comes from the marks (or from
      // the service, back: it has the failed node's report).
      MarkDone(kExitSuccess);
      PollMarks();
      return;
    }
    if (remote_outcome_) {
      OnRunFinished(*remote_outcome_);
      return;
    }
    rdzv_v1::AgentMessage message;
    rdzv_v1::NodeReport* report = message.mutable_report();
    report->set_round(round_);
    if (first_failure_) {
      report->set_succeeded(false);
      report->set_message(absl::StrCat("rank ", first_failure_->rank, " (local rank ",
                                       first_failure_->local_rank, ") ",
                                       first_failure_->Describe()));
      rdzv_v1::WorkerFailure* f = report->mutable_failure();
      f->set_rank(first_failure_->rank);
      f->set_local_rank(first_failure_->local_rank);
      f->set_exit_code(first_failure_->exit_code);
      f->set_signal(first_failure_->signal);
      f->set_time_unix_s(absl::ToDoubleSeconds(first_failure_->time - absl::UnixEpoch()));
    } else {
      report->set_succeeded(true);
    }
    // The done mark lets node rank 0 keep the round's store until every node is done, and the
    // nodes learn the outcome, even when the service is gone.
    MarkDone(first_failure_ ? first_failure_->ExitStatus() : kExitSuccess);
    last_report_ = message;
    if (ServiceLost()) {
      PollMarks();  // The report goes out after the rejoin.
      return;
    }
    // A failed send means the stream ended: its closed callback starts reconnecting.
    if (session_open_) (void)session_->Send(message);
    // Wait for the service's answer: the run's end (node rank 0 keeps serving the store until
    // every node is done), or a new round (a restart after a failure).
  };
  // Bound the wait for output: a worker's descendant that left its process group may hold the
  // pipes open forever.
  drain_timer_.expires_after(std::chrono::seconds(2));
  drain_timer_.async_wait([report](boost::system::error_code ec) {
    if (!ec) report();
  });
  workers_->OnDrained(report);
}

void Agent::OnRunFinished(const rdzv_v1::RunFinished& finished) {
  switch (state_) {
    case State::kJoining:
      // This node never ran a worker of the run: whatever its outcome, it is not this node's
      // (torchrun: RendezvousClosedError). Services that tell waiting nodes so send an Error.
      Finish(kExitNotAdmitted,
             absl::StrCat("run '", options_.run_id, "' ended (",
                          finished.succeeded() ? "succeeded" : "failed", ": ", finished.message(),
                          ") before node '", options_.node_id, "' was admitted to it"));
      return;
    case State::kWaitingForRound:
      Finish(finished.succeeded() ? 0 : 1,
             finished.succeeded() ? "" : absl::StrCat("run failed: ", finished.message()));
      return;
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kRerounding:
      if (finished.succeeded()) return;  // Cannot happen before this node reported.
      pending_assignment_.reset();
      if (!remote_outcome_ && !first_failure_) {
        remote_outcome_ = finished;
        spdlog::error("dgt-run: run failed on another node: {}; stopping this node's workers",
                      finished.message());
      }
      if (state_ == State::kRunning) StopWorkers();
      if (state_ == State::kRestarting) state_ = State::kStopping;  // No restart now.
      return;
    case State::kAwaitingOutcome:
      if (stop_signal_ != 0) {
        Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
      } else if (finished.succeeded()) {
        Finish(0, "");
      } else if (first_failure_ && finished.has_failure() &&
                 finished.failure().node_id() != options_.node_id) {
        // Another node failed first: that is the run's root cause; this node's failure followed.
        spdlog::warn("dgt-run: this node's {} followed the root cause on another node",
                     DescribeFailure(*first_failure_));
        failures_.clear();
        first_failure_.reset();
        OnRunFinished(finished);
      } else if (first_failure_) {
        Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
      } else {
        int code = finished.failure().signal() != 0 ? 128 + finished.failure().signal()
                                                    : finished.failure().exit_code();
        Finish(code != 0 ? code : 1, absl::StrCat("run failed: ", finished.message()));
      }
      return;
    case State::kDone:
      return;
  }
}

void Agent::KeepTempLogRootForSummary(std::string* summary) {
  if (!log_root_is_temp_ || log_root_.empty()) return;
  bool names_a_file = false;
  for (const auto* list : {&failures_, &recovered_failures_}) {
    for (const Failure& f : *list) names_a_file |= f.error.has_value();
  }
  if (!names_a_file) return;
  // The summary names error files in the temporary log directory: removing it at exit would
  // leave the user paths that no longer exist.
  log_root_is_temp_ = false;
  if (absl::Status s = watchdog_.KeepOnExit(); !s.ok()) {
    spdlog::warn("dgt-run: the watchdog may still remove {}: {}", log_root_, s.message());
  }
  absl::StrAppend(summary, "kept: ", log_root_,
                  " (the temporary log directory, for the error file(s) named above)\n");
}

void Agent::Finish(int exit_status, const std::string& message) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  exit_status_ = exit_status;
  std::string summary;
  if (exit_status != 0 && !failures_.empty() && first_failure_) {
    summary = Summary();
    KeepTempLogRootForSummary(&summary);
  }
  if (options_.log_format == LogFormat::kJson) {
    // One JSON record, so that log pipelines reading stderr keep parsing.
    if (!message.empty()) {
      std::string text =
          absl::StrCat(summary, "dgt-run: ", exit_status == 0 ? "done" : "error", ": ", message);
      if (exit_status == 0) {
        spdlog::info("{}", text);
      } else {
        spdlog::error("{}", text);
      }
    } else if (exit_status == 0) {
      spdlog::info("dgt-run: run '{}' succeeded", options_.run_id);
    }
  } else if (!message.empty()) {
    std::fputs(summary.c_str(), stderr);
    std::fprintf(stderr, "dgt-run: %s: %s\n", exit_status == 0 ? "done" : "error", message.c_str());
  } else if (exit_status == 0) {
    spdlog::info("dgt-run: run '{}' succeeded", options_.run_id);
  }
  // With the service there, every node hears the outcome from it: marks still queued would only
  // make this agent wait for a store that may be gone already.
  if (round_tasks_ && !ServiceLost() && !linger_) round_tasks_->DropQueued();
  join_timer_.cancel();
  drain_timer_.cancel();
  reconnect_timer_.cancel();
  marks_timer_.cancel();
  tf_timer_.cancel();
  if (tf_tasks_) tf_tasks_->DropQueued();
  signals_.cancel();
  if (workers_) workers_->KillAll();
  work_.reset();
  io_.stop();
}

}  // namespace dgt::agent
