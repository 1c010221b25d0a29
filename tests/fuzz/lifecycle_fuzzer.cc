// Stateful libFuzzer target over the node lifecycle (agent/lifecycle/node_lifecycle.h) on a
// simulated clock. The input picks the backend (a rendezvous service or static), the restart
// policy and --max-restarts, then a sequence of events in any order: round assignments (some in
// place, some of them matching the running round), stops and
// refusals from the service, the run's outcome, session ends, reconnect windows that pass, worker
// exits (success, a code, a signal), outside signals, clock ticks, the runtime's own finish, and
// the runtime's answers to the actions it was given (a spawn done, a failure published, the
// output drained, the done marks read). The harness carries every action out as the Agent does
// (agent/agent.cc, agent/coord/rendezvous_coordinator_service.cc): a Linger finishes at once or
// keeps the round's store, FinishFromMarks finishes (node rank 0 keeps its store first). At the
// end of the input the node is stopped with SIGTERM and every worker exits, until it finishes.
// After every event:
//   - at most one Finish, and after the closing events exactly one;
//   - no worker is started after the Finish;
//   - workers are kept (ApplyAssignment with keep_workers) only for an in-place round with this
//     node's running node rank and node count;
//   - the Finish's exit status is the one docs/EXIT_CODES.md gives for the first cause: an
//     outside signal N (128+N), a refusal before admission (77), the join timeout (75; also the
//     run's end for too few nodes after losing nodes), the service lost (69), this node's first
//     failed worker (its code, or 128 + its signal), the run's root cause on another node (its
//     code), and 0 only for a run that succeeded.
// A divergence aborts with what broke on stderr (DGT_FUZZ_TRACE=1: with the input's events).
#include <fuzzer/FuzzedDataProvider.h>
#include <signal.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/lifecycle/restart_policy.h"
#include "agent/workers/worker_exit.h"

namespace {

using dgt::agent::Clock;
using dgt::agent::DebugString;
using dgt::agent::LifecycleAction;
using dgt::agent::LifecycleActions;
using dgt::agent::MarkedFailure;
using dgt::agent::MarksView;
using dgt::agent::NodeLifecycle;
using dgt::agent::NodeState;
using dgt::agent::RestartBackend;
using dgt::agent::RestartPolicy;
using dgt::agent::RoundAssignment;
using dgt::agent::RunOutcome;
using dgt::agent::SessionEnd;
using dgt::agent::WorkerExit;
namespace actions = dgt::agent::actions;

constexpr int kMaxSteps = 120;
constexpr int kClosingSteps = 200;
constexpr char kNodeId[] = "node-a";
constexpr double kJoinTimeoutS = 600;
constexpr double kReconnectTimeoutS = 60;

// The events of the current input, printed with a divergence (DGT_FUZZ_TRACE=1 only: it costs).
std::string* trace = nullptr;

[[noreturn]] void Diverge(const std::string& what) {
  if (trace != nullptr) std::fprintf(stderr, "%s", trace->c_str());
  std::fprintf(stderr, "lifecycle_fuzzer divergence: %s\n", what.c_str());
  std::abort();
}

class SimClock final : public Clock {
 public:
  absl::Time Now() const override { return now; }
  absl::Time now = absl::FromUnixSeconds(1'000'000);
};

// What ends the node, as docs/EXIT_CODES.md's table names it.
struct Cause {
  std::string what;
  int code = 0;
  // Another node's stop by an outside signal: an outside signal to this node later still decides.
  // So does another node's outcome heard after the first one (the lifecycle keeps the first).
  bool yields_to_signal = false;
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider* in) : in_(in) {
    NodeLifecycle::Options o;
    o.run_id = "job";
    o.node_id = kNodeId;
    o.rdzv_endpoint = "127.0.0.1:29400";
    o.advertised_address = "10.0.0.1";
    o.min_nodes = 1;
    o.join_timeout_s = kJoinTimeoutS;
    o.reconnect_timeout_s = kReconnectTimeoutS;
    static_ = in_->ConsumeBool();
    o.backend = static_ ? RestartBackend::kStatic : RestartBackend::kRendezvous;
    o.restart_policy = in_->ConsumeBool() ? RestartPolicy::kRank : RestartPolicy::kGroup;
    o.shrink = o.restart_policy == RestartPolicy::kRank && in_->ConsumeBool();
    o.max_restarts = in_->ConsumeIntegralInRange<int>(0, 2);
    nproc_ = in_->ConsumeIntegralInRange<int>(1, 3);
    o.nproc_per_node = nproc_;
    if (static_) {
      node_rank_ = in_->ConsumeIntegralInRange<int>(0, 1);
      node_count_ = 2;
    }
    Trace(absl::StrCat("options: ", static_ ? "static" : "rendezvous",
                       o.restart_policy == RestartPolicy::kRank ? " rank" : " group",
                       o.shrink ? " shrink" : "", " max_restarts=", o.max_restarts,
                       " nproc=", nproc_));
    lc_.emplace(std::move(o), &clock_);
    if (!static_) {
      lc_->OnJoinSent(clock_.now);
      join_deadline_ = clock_.now + absl::Seconds(kJoinTimeoutS);
    }
  }

  void Run() {
    for (int step = 0; step < kMaxSteps && in_->remaining_bytes() > 0; ++step) Step();
    Close();
  }

 private:
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    int attempt = 0;
    int round = 0;  // The harness's count of StartRound actions.
  };

  void Trace(const std::string& line) {
    if (trace != nullptr) absl::StrAppend(trace, line, "\n");
  }

  bool done() const { return finishes_ > 0; }

  // --- The causes ------------------------------------------------------------------------------
  void AddCause(std::string what, int code, bool yields_to_signal = false) {
    Trace(absl::StrCat("  cause: ", what, " -> ", code));
    causes_.push_back(Cause{std::move(what), code, yields_to_signal});
  }
  // A new round (or the service's stop) leaves the workers' failures without an outcome.
  void DropFailureCauses() {
    std::vector<Cause> kept;
    for (Cause& c : causes_) {
      if (c.what.rfind("worker", 0) != 0) kept.push_back(std::move(c));
    }
    causes_ = std::move(kept);
  }

  // --- Carrying the actions out, as the Agent does ---------------------------------------------
  void Carry(const LifecycleActions& out) {
    for (const LifecycleAction& a : out) {
      Trace(absl::StrCat("  -> ", DebugString(a)));
      std::visit([this](const auto& x) { CarryOne(x); }, a);
    }
  }

  template <typename A>
  void CarryOne(const A& a) {
    if constexpr (std::is_same_v<A, actions::StartRound>) {
      if (done()) Diverge("StartRound after the Finish");
      if (alive() > 0) Diverge(absl::StrCat("StartRound while ", alive(), " workers run"));
      ++rounds_started_;
      workers_.clear();
      for (int l = 0; l < nproc_; ++l) {
        workers_.push_back(Worker{node_rank_ * nproc_ + l, l, a.restart_count, rounds_started_});
      }
      stopping_ = false;
      killed_ = false;
      spawning_ = true;
      ever_started_ = true;
    } else if constexpr (std::is_same_v<A, actions::ApplyAssignment>) {
      if (a.keep_workers) {
        // An in-place round: the running workers go on in it.
        if (!a.assignment || !a.assignment->in_place || a.assignment->node_rank != node_rank_ ||
            a.assignment->node_count != node_count_ || done() || !ever_started_) {
          Diverge("workers kept for a round that is not this node's running round in place");
        }
        round_ = a.assignment->round;
        return;
      }
      RoundAssignment r;
      if (a.assignment) {
        r = *a.assignment;
      } else {
        r.node_rank = node_rank_;
        r.node_count = node_count_;
        r.reason = "static";
      }
      node_rank_ = r.node_rank;
      node_count_ = r.node_count;
      round_ = r.round;
      applied_ = true;
      DropFailureCauses();
      Carry(lc_->OnRoundApplied(r));
    } else if constexpr (std::is_same_v<A, actions::StopWorkers>) {
      stopping_ = true;
      stop_signal_ = a.signal == 0 ? SIGTERM : a.signal;
    } else if constexpr (std::is_same_v<A, actions::KillWorkers>) {
      killed_ = true;
    } else if constexpr (std::is_same_v<A, actions::RecordFailure>) {
      // The lifecycle's first failure (not a stale attempt's, kIgnore).
      const std::optional<WorkerExit>& first = lc_->first_failure();
      if (!a.recovered && !recorded_ && first && first->pid == a.exit.pid &&
          first->attempt == a.exit.attempt) {
        recorded_ = true;
        AddCause(absl::StrCat("worker rank ", a.exit.rank), a.exit.ExitStatus());
      }
    } else if constexpr (std::is_same_v<A, actions::ClearFailures>) {
      recorded_ = false;
      DropFailureCauses();
    } else if constexpr (std::is_same_v<A, actions::PublishFailure>) {
      if (a.restart) publishes_.push_back({a, rounds_started_});
    } else if constexpr (std::is_same_v<A, actions::WatchDrain>) {
      drain_watched_ = true;
    } else if constexpr (std::is_same_v<A, actions::Report>) {
      report_ = a;
    } else if constexpr (std::is_same_v<A, actions::PollMarks> ||
                         std::is_same_v<A, actions::PollMarksLater>) {
      marks_polled_ = true;
    } else if constexpr (std::is_same_v<A, actions::FinishFromMarks>) {
      if (node_rank_ == 0) {
        FinishLinger(a.exit_status, a.text, /*wait_for_seen=*/true);
      } else {
        Carry(lc_->Finish(a.exit_status, a.text));
      }
    } else if constexpr (std::is_same_v<A, actions::Linger>) {
      if (static_) {
        if (!done() && !lc_->lingering()) Carry(lc_->Finish(a.exit_status, a.text));
      } else {
        FinishLinger(a.exit_status, a.text, /*wait_for_seen=*/false);
      }
    } else if constexpr (std::is_same_v<A, actions::Reconnect>) {
      if (!lost_) lost_since_ = clock_.now;
      lost_ = true;
      reconnecting_ = true;
    } else if constexpr (std::is_same_v<A, actions::Finish>) {
      ++finishes_;
      if (finishes_ > 1) Diverge(absl::StrCat("a second Finish: ", DebugString(a)));
      CheckExitStatus(a);
    }
    // Log, ForwardSignal, InterruptCoordinator, MarkDone: nothing to simulate.
  }

  // RendezvousCoordinator::FinishLinger.
  void FinishLinger(int exit_status, const std::string& text, bool wait_for_seen) {
    if (done() || lc_->lingering()) return;
    const bool store = node_rank_ == 0 && round_ >= 0 && applied_;
    if (!store || node_count_ <= 1 || !lost_) {
      Carry(lc_->Finish(exit_status, text));
      return;
    }
    lc_->OnLingerStarted(exit_status, text, wait_for_seen,
                         clock_.now + absl::Seconds(kReconnectTimeoutS));
    reconnecting_ = false;
    marks_polled_ = true;
  }

  void CheckExitStatus(const actions::Finish& f) {
    if (causes_.empty()) {
      if (f.exit_status != 0) {
        Diverge(absl::StrCat("Finish(", f.exit_status, ") with no cause: ", f.text));
      }
      if (!success_seen_) Diverge(absl::StrCat("Finish(0) before any success: ", f.text));
      return;
    }
    const Cause& first = causes_.front();
    if (f.exit_status != first.code) {
      std::string all;
      for (const Cause& c : causes_) absl::StrAppend(&all, " [", c.what, ": ", c.code, "]");
      Diverge(absl::StrCat("Finish(", f.exit_status, ", ", f.text, ") but the first cause is ",
                           first.what, " (", first.code, "); causes:", all));
    }
  }

  int alive() const { return static_cast<int>(workers_.size()); }

  // --- The events ------------------------------------------------------------------------------
  void Step() {
    const int op = in_->ConsumeIntegralInRange<int>(0, 17);
    switch (op) {
      case 0:
        return WorkerExits(/*closing=*/false);
      case 1:
        return SpawnDone();
      case 2:
        return PublishDone();
      case 3:
        return Drained();
      case 4:
        return Marks();
      case 5:
        return Tick(absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 700)));
      case 6:
        return Signal();
      case 7:
      case 8:
        return static_ ? StaticEvent() : Assignment();
      case 9:
        return static_ ? StaticEvent() : ServiceStop();
      case 10:
        return static_ ? StaticEvent() : RunFinishedEvent();
      case 11:
        return static_ ? StaticEvent() : Refused();
      case 12:
        return static_ ? StaticEvent() : SessionClosed();
      case 13:
        return static_ ? StaticEvent() : WindowOver();
      case 14:
        return static_ ? StaticEvent() : ServiceBack();
      case 15:
        return RuntimeFinish();
      case 16:
        return Tick(absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 70)));
      default:
        return WorkerExits(/*closing=*/false);
    }
  }

  void WorkerExits(bool closing) {
    if (workers_.empty()) return;
    const size_t i = closing ? 0 : in_->ConsumeIntegralInRange<size_t>(0, workers_.size() - 1);
    const Worker w = workers_[i];
    workers_.erase(workers_.begin() + static_cast<std::ptrdiff_t>(i));
    WorkerExit e;
    e.rank = w.rank;
    e.local_rank = w.local_rank;
    e.attempt = w.attempt;
    e.pid = 1000 + w.rank;
    e.time = clock_.now;
    if (closing || killed_) {
      e.signal = killed_ ? SIGKILL : stop_signal_;
    } else if (stopping_ && in_->ConsumeBool()) {
      e.signal = stop_signal_;
    } else {
      switch (in_->ConsumeIntegralInRange<int>(0, 3)) {
        case 0:
          break;  // Succeeded.
        case 1:
          e.exit_code = in_->ConsumeIntegralInRange<int>(1, 127);
          break;
        case 2:
          e.signal = in_->PickValueInArray({SIGSEGV, SIGKILL, SIGABRT});
          break;
        default:
          e.exit_code = 0;
          break;
      }
    }
    if (e.succeeded()) success_seen_ = true;
    Trace(absl::StrCat("worker rank ", e.rank, " attempt ", e.attempt, " exits: ", e.Describe(),
                       " (", alive(), " left)"));
    Carry(lc_->OnWorkerExit(e, alive(), clock_.now));
  }

  void SpawnDone() {
    if (!spawning_) return;
    spawning_ = false;
    Trace("spawn done");
    Carry(lc_->OnSpawnDone(alive(), clock_.now));
  }

  // WorkerGroup::PublishFailure with a restart: OnFailurePublished, the replacement, then
  // OnWorkersIdle.
  void PublishDone() {
    if (publishes_.empty()) return;
    const actions::PublishFailure p = publishes_.front().first;
    const bool current = publishes_.front().second == rounds_started_;
    publishes_.erase(publishes_.begin());
    Trace(absl::StrCat("failure of rank ", p.exit.rank, " published"));
    if (lc_->OnFailurePublished(current)) {
      if (done()) Diverge("a replacement worker started after the Finish");
      if (in_->ConsumeBool()) {
        workers_.push_back(
            Worker{p.exit.rank, p.exit.local_rank, p.restart_count + 1, rounds_started_});
      } else {
        Trace("  the replacement could not start");
        Carry(lc_->OnRankRestartFailed(p.exit));
      }
    }
    Carry(lc_->OnWorkersIdle(alive(), clock_.now));
  }

  void Drained() {
    if (!drain_watched_) return;
    drain_watched_ = false;
    Trace("output drained");
    Carry(lc_->OnDrained());
  }

  void Marks() {
    if (!marks_polled_) return;
    marks_polled_ = false;
    std::optional<MarksView> view;
    if (in_->ConsumeBool()) {
      MarksView m;
      m.all_done = in_->ConsumeBool();
      m.all_succeeded = m.all_done && !report_failed() && in_->ConsumeBool();
      m.seen_by_others = in_->ConsumeBool();
      if (!m.all_succeeded && in_->ConsumeBool()) {
        m.first_worker_failure = node_count_ > 1 ? 1 - std::min(node_rank_, 1) : node_rank_;
        m.first_worker_failure_status = in_->ConsumeIntegralInRange<int>(1, 3);
      }
      view = m;
    }
    Trace(absl::StrCat(
        "marks read: ",
        view ? absl::StrCat("all_done=", view->all_done, " all_succeeded=", view->all_succeeded,
                            " failed node rank ", view->first_worker_failure, " status ",
                            view->first_worker_failure_status)
             : "none",
        lost_ ? " (service lost)" : ""));
    if (view && view->first_worker_failure >= 0 && view->first_worker_failure != node_rank_ &&
        lost_ && !done()) {
      // Another node's failure, first in time: its status is the run's.
      marked_failure_ = view->first_worker_failure_status;
    }
    const LifecycleActions out = lc_->OnMarks(view, lost_, clock_.now, clock_.now - lost_since_);
    for (const LifecycleAction& a : out) {
      if (const auto* f = std::get_if<actions::FinishFromMarks>(&a)) {
        if (f->exit_status == 0) {
          success_seen_ = true;
        } else if (marked_failure_ && f->exit_status == *marked_failure_ && !recorded_) {
          AddCause("another node's failed done mark", *marked_failure_);
        }
      } else if (std::holds_alternative<actions::StopWorkers>(a) && marked_failure_) {
        AddCause("another node's failed done mark", *marked_failure_);
      }
    }
    Carry(out);
  }

  bool report_failed() const { return report_ && report_->exit_status != 0; }

  void Tick(absl::Duration d) {
    clock_.now += d;
    Trace(absl::StrCat("tick +", absl::FormatDuration(d)));
    if (!done() && join_deadline_ && clock_.now >= *join_deadline_ && !assigned_) {
      AddCause("join timeout", 75);
    }
    if (join_deadline_ && clock_.now >= *join_deadline_) join_deadline_.reset();
    if (!done() && round_wait_deadline_ && clock_.now >= *round_wait_deadline_ &&
        lc_->state() == NodeState::kWaitingForRound) {
      AddCause("no new round after a stop", 75);
    }
    if (round_wait_deadline_ && clock_.now >= *round_wait_deadline_) round_wait_deadline_.reset();
    Carry(lc_->OnTick(clock_.now));
    if (const std::optional<absl::Time> next = lc_->NextDeadline();
        next && *next <= clock_.now && !done()) {
      Diverge(absl::StrCat("a deadline ", absl::FormatDuration(clock_.now - *next),
                           " in the past after a tick"));
    }
  }

  void Signal() {
    const int sig = in_->PickValueInArray({SIGTERM, SIGINT, SIGUSR1, SIGTERM, SIGHUP});
    SendSignal(sig);
  }

  void SendSignal(int sig) {
    Trace(absl::StrCat("signal ", sig));
    const bool notify = sig == SIGUSR1 || sig == SIGUSR2;
    if (!notify && !done() && !signalled_) {
      signalled_ = true;
      AddCause(absl::StrCat("signal ", sig), 128 + sig);
      // Before it only causes that yield to a signal: the signal is the first cause.
      if (std::all_of(causes_.begin(), causes_.end() - 1,
                      [](const Cause& c) { return c.yields_to_signal; })) {
        std::rotate(causes_.begin(), causes_.end() - 1, causes_.end());
      }
    }
    Carry(lc_->OnSignal(sig, ever_started_));
  }

  RoundAssignment NextAssignment(const char* reason) {
    RoundAssignment a;
    a.round = ++last_round_;
    a.in_place = in_->ConsumeIntegralInRange<int>(0, 3) == 0;
    if (a.in_place && in_->ConsumeBool()) {
      // A spare took another node's place: this node's running round goes on.
      a.node_count = node_count_;
      a.node_rank = node_rank_;
      a.restart_count = restart_count_;
    } else {
      a.node_count = in_->ConsumeIntegralInRange<int>(1, 3);
      a.node_rank = in_->ConsumeIntegralInRange<int>(0, a.node_count - 1);
      a.restart_count = restart_count_ + (in_->ConsumeBool() ? 1 : 0);
    }
    restart_count_ = a.restart_count;
    a.reason = reason;
    return a;
  }

  void Assignment() {
    if (closed_) return;
    const RoundAssignment a = NextAssignment("fuzzed");
    Trace(absl::StrCat("assignment: round ", a.round, " node rank ", a.node_rank, " of ",
                       a.node_count, " restart ", a.restart_count, a.in_place ? " in place" : ""));
    if (!done() && !signalled_) {
      assigned_ = true;
      round_wait_deadline_.reset();
    }
    report_.reset();
    Connected();
    Carry(lc_->OnAssignment(a, alive(), clock_.now));
  }

  void ServiceStop() {
    if (closed_ || !assigned_) return;
    Trace("the service stops this node's workers");
    Connected();
    report_.reset();  // The report was of the stopped round.
    if (!done() && !signalled_ && lc_->state() != NodeState::kJoining) {
      round_wait_deadline_ = clock_.now + absl::Seconds(kJoinTimeoutS);
      recorded_ = false;
      DropFailureCauses();
    }
    Carry(lc_->OnStop("too few nodes", alive(), clock_.now));
  }

  void RunFinishedEvent() {
    if (closed_) return;
    RunOutcome o;
    const int kind = in_->ConsumeIntegralInRange<int>(0, 3);
    if (kind == 0) {
      // Only after every node reported success.
      if (!report_ || report_->exit_status != 0) return;
      o.succeeded = true;
      success_seen_ = true;
    } else if (kind == 1) {
      // This node's own failure was the root cause: only after it reported one.
      if (!report_failed()) return;
      o.has_failure = true;
      o.failed_node_id = kNodeId;
      o.exit_code = report_->exit_status;
    } else if (kind == 2) {
      o.has_failure = true;
      o.failed_node_id = "node-b";
      if (in_->ConsumeBool()) {
        o.signal = SIGKILL;
      } else {
        o.exit_code = in_->ConsumeIntegralInRange<int>(1, 127);
      }
    } else {
      // Too few nodes after losing nodes, for the join timeout.
      o.too_few_nodes = in_->ConsumeBool();
    }
    o.message = "fuzzed outcome";
    Trace(absl::StrCat("run finished: ", o.succeeded ? "succeeded" : "failed",
                       o.has_failure ? absl::StrCat(" on ", o.failed_node_id) : "", " code ",
                       o.exit_code, " signal ", o.signal,
                       o.too_few_nodes ? " (too few nodes)" : ""));
    closed_ = true;
    Connected();
    if (!done() && !o.succeeded) {
      const int code = o.signal != 0 ? 128 + o.signal : (o.exit_code != 0 ? o.exit_code : 1);
      if (o.too_few_nodes) {
        AddCause("too few nodes for the join timeout", 75);
      } else if (!assigned_) {
        AddCause("the run ended before admission", 77);
      } else if (!o.has_failure) {
        AddCause("the run failed without a root cause", 1);
      } else if (o.failed_node_id != kNodeId) {
        // The service's root cause is first in time across nodes: it takes the place of this
        // node's first failure, before what followed that.
        std::vector<Cause> kept;
        bool placed = false;
        for (Cause& c : causes_) {
          if (c.what.rfind("worker", 0) != 0) {
            kept.push_back(std::move(c));
          } else if (!placed) {
            kept.push_back(Cause{"the run's root cause on another node", code});
            placed = true;
          }
        }
        causes_ = std::move(kept);
        if (placed) {
          Trace(
              absl::StrCat("  cause: the run's root cause on another node, before this node's "
                           "failure -> ",
                           code));
        } else {
          AddCause("the run's root cause on another node", code);
        }
      }
    }
    Carry(lc_->OnRunFinished(o));
  }

  void Refused() {
    if (closed_) return;
    const bool rejoin = lost_ && in_->ConsumeBool();
    Trace(absl::StrCat("refused", rejoin ? " (rejoin)" : ""));
    Connected();
    closed_ = true;
    if (!done()) {
      if (lc_->state() == NodeState::kJoining) {
        AddCause("refused before admission", 77);
      } else {
        AddCause(rejoin ? "rejoin refused" : "the service ended this node's part",
                 rejoin ? 69 : 77);
      }
    }
    Carry(lc_->OnRefused("fuzzed refusal", rejoin, alive()));
  }

  void SessionClosed() {
    SessionEnd end;
    end.refused = in_->ConsumeBool();
    if (in_->ConsumeBool()) end.host_lost = "the hosting node is gone";
    end.lingering = lc_->lingering();
    end.error = "fuzzed session end";
    Trace(absl::StrCat("session closed", end.refused ? " (refused)" : "",
                       end.host_lost ? " (host lost)" : ""));
    if (!done() && !signalled_ && !lc_->has_remote_outcome()) {
      if (lc_->state() == NodeState::kJoining && end.refused) {
        AddCause("session refused before admission", 77);
      } else if (end.host_lost && lc_->state() != NodeState::kJoining && !end.lingering) {
        AddCause("the node hosting the service lost", 69);
      }
    }
    if (end.host_lost || end.refused) closed_ = true;
    if (end.host_lost) reconnecting_ = false;  // Nothing to reconnect to.
    Carry(lc_->OnSessionClosed(end, alive()));
  }

  void WindowOver() {
    if (!reconnecting_) return;
    reconnecting_ = false;
    closed_ = true;
    std::optional<MarkedFailure> marked;
    if (in_->ConsumeBool()) marked = MarkedFailure{1 - std::min(node_rank_, 1), 3};
    Trace(absl::StrCat("reconnect window over", marked ? " (a failed mark)" : ""));
    if (!done() && !signalled_) {
      if (marked && !recorded_ && lc_->state() == NodeState::kAwaitingOutcome) {
        AddCause("another node's failed done mark", marked->exit_status);
      } else {
        AddCause("the service lost", 69);
      }
    }
    Carry(lc_->OnReconnectWindowOver(lc_->lingering(), marked, alive()));
  }

  void ServiceBack() {
    if (!lost_ || closed_) return;
    Trace("the service is back");
    Connected();
  }

  // A message from the service: the session is up (again).
  void Connected() {
    lost_ = false;
    reconnecting_ = false;
  }

  void StaticEvent() {
    if (!static_ || static_answered_) return;
    switch (in_->ConsumeIntegralInRange<int>(0, 2)) {
      case 0: {
        if (assigned_) return;
        const int kind = in_->ConsumeIntegralInRange<int>(0, 2);
        Trace(absl::StrCat("static start: ", kind == 0 ? "ok" : kind == 1 ? "exists" : "failed"));
        if (!done() && !signalled_ && lc_->state() == NodeState::kJoining) {
          if (kind == 1) AddCause("another node holds this node rank", 77);
          if (kind == 2) AddCause("node rank 0 unreachable", 69);
          if (kind == 0) assigned_ = true;
        }
        if (kind != 0) closed_ = true;
        Carry(lc_->OnStaticStarted(kind == 0, kind == 1, "fuzzed"));
        return;
      }
      case 1:
        if (!report_ || static_answered_) return;
        return StaticOutcome(in_->ConsumeBool());
      default: {
        if (!assigned_) return;
        const int code = in_->ConsumeIntegralInRange<int>(1, 127);
        const bool stopped = in_->ConsumeBool();
        Trace(absl::StrCat("static: another node ", stopped ? "stopped by a signal" : "failed",
                           " with ", code));
        closed_ = true;
        if (!done() && !signalled_ && !recorded_) {
          AddCause(stopped ? "another node's stop by a signal" : "another node's failure", code,
                   stopped || remote_heard_);
        }
        remote_heard_ = true;
        Carry(lc_->OnStaticRemoteFailure(code, "fuzzed", stopped));
        return;
      }
    }
  }

  // The static coordinator's answer to this node's Report.
  void StaticOutcome(bool others_ok) {
    Trace(absl::StrCat("static outcome: ", others_ok ? "ok" : "others unheard"));
    closed_ = true;
    static_answered_ = true;
    if (!done() && !others_ok) AddCause("the other nodes unheard", 1);
    if (!done() && others_ok && !report_failed()) success_seen_ = true;
    Carry(lc_->OnStaticOutcome(others_ok, "fuzzed"));
  }

  // The runtime's own finish: a round's start failed (its log directory, TF_CONFIG).
  void RuntimeFinish() {
    if (!spawning_ || !causes_.empty()) return;
    Trace("the runtime finishes on its own (1)");
    if (!done()) AddCause("the launcher's own error", 1);
    Carry(lc_->Finish(1, "launcher error"));
  }

  // SIGTERM, then every worker exits and every pending answer comes, until the node finishes.
  void Close() {
    Trace("closing");
    if (!done()) SendSignal(SIGTERM);
    for (int i = 0; i < kClosingSteps && !done(); ++i) {
      if (spawning_) {
        SpawnDone();
      } else if (!publishes_.empty()) {
        PublishDone();
      } else if (!workers_.empty()) {
        WorkerExits(/*closing=*/true);
      } else if (drain_watched_) {
        Drained();
      } else if (static_ && report_ && !static_answered_) {
        StaticOutcome(/*others_ok=*/true);
      } else if (lc_->lingering() || marks_polled_) {
        Tick(absl::Seconds(kReconnectTimeoutS));
        marks_polled_ = true;
        Marks();
      } else if (reconnecting_) {
        WindowOver();
      } else if (const std::optional<absl::Time> next = lc_->NextDeadline()) {
        Tick(std::max(*next - clock_.now, absl::ZeroDuration()));
      } else {
        break;
      }
    }
    if (!done()) {
      Diverge(absl::StrCat("no Finish after SIGTERM and every worker's exit (state ",
                           static_cast<int>(lc_->state()), ")"));
    }
  }

  FuzzedDataProvider* in_;
  SimClock clock_;
  std::optional<NodeLifecycle> lc_;
  bool static_ = false;
  int nproc_ = 1;
  int node_rank_ = 0;
  int node_count_ = 1;
  int64_t round_ = -1;
  int64_t last_round_ = -1;
  int restart_count_ = 0;
  bool applied_ = false;
  bool assigned_ = false;         // A round came (or the static start succeeded).
  bool closed_ = false;           // The service said its last word.
  bool static_answered_ = false;  // The static coordinator answered this node's Report.
  bool signalled_ = false;        // An outside stop signal came.
  bool recorded_ = false;         // A failure is recorded since the last ClearFailures.
  bool success_seen_ = false;
  std::vector<Worker> workers_;
  int rounds_started_ = 0;
  bool ever_started_ = false;
  bool spawning_ = false;
  bool stopping_ = false;
  bool killed_ = false;
  int stop_signal_ = SIGTERM;
  // PublishFailure with a restart, and the round (rounds_started_) it was for.
  std::vector<std::pair<actions::PublishFailure, int>> publishes_;
  bool drain_watched_ = false;
  bool marks_polled_ = false;
  bool lost_ = false;
  bool reconnecting_ = false;
  absl::Time lost_since_;
  std::optional<int> marked_failure_;
  std::optional<actions::Report> report_;
  std::optional<absl::Time> join_deadline_;
  std::optional<absl::Time> round_wait_deadline_;
  std::vector<Cause> causes_;
  bool remote_heard_ = false;  // The static backend told this node of another node's outcome.
  int finishes_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool traced = std::getenv("DGT_FUZZ_TRACE") != nullptr;
  std::string events;
  trace = traced ? &events : nullptr;
  FuzzedDataProvider in(data, size);
  Harness harness(&in);
  harness.Run();
  return 0;
}
