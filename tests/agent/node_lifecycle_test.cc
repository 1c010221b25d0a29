// NodeLifecycle (agent/lifecycle/node_lifecycle.h) on a simulated clock, its worker actions carried
// out on a FakeProcessLauncher: every test asserts the exact action sequence of each step.
//
// Scenario (TEST name)                        End-to-end test covering it today (tests/e2e/)
// ------------------------------------------  ------------------------------------------------
// StandaloneRunSucceeds test_launch.py::test_standalone_digits_reaches_accuracy
// WorkerFailureIsReportedWithItsCode          test_launch.py::test_worker_exit_code_is_reported
// HungRankDeclaredFirstIsTheRootCause        (unit only: the reap order of ranks killed together)
// FailureOnAnotherNodeStopsThisOne test_launch.py::test_failure_on_one_node_stops_the_other
// RootCauseOnAnotherNodeWins                  test_recovery_dgt_run.py::
//                                               test_rank_policy_two_failures_on_two_nodes_converge
// StopSignalIsForwardedThenFinishes128PlusN   test_supervision.py::test_stop_signal_is_forwarded
// NotifySignalIsForwardedWithoutStopping      test_supervision.py::
//                                               test_notify_signal_is_forwarded_without_stopping
// SecondSignalKillsTheWorkers                 (unit only)
// GroupRestartIsANewRound test_supervision.py::test_group_restart_up_to_max_restarts
// GroupRestartExhaustedFails                  test_supervision.py::test_group_restart_exhausted
// StaticOneNodeGroupRestartIsLocal            (unit only: RestartTracker's static one-node cell;
//                                             dgt-run runs one node on the embedded rendezvous)
// RankRestartKeepsTheOthers test_supervision.py::test_rank_restart_keeps_the_other_pids,
//                                             test_recovery_dgt_run.py::
//                                               test_rank_policy_restarts_only_the_dead_rank
// RankRestartStartFailureStops                (unit only)
// RankRestartAfterTheRoundStoppedIsNotStarted (unit only)
// ShrinkDropsTheRank                          test_recovery_dgt_run.py::
//                                               test_shrink_mode_finishes_with_three_ranks
// NewRoundWhileRunningRestartsTheWorkers      test_elastic.py::
//                                               test_kill9_of_one_agent_gives_survivors_a_new_round,
//                                             test_elastic.py::test_late_node_scales_the_job_up
// FailureRestartsEveryNodeInANewRound         test_elastic.py::
//                                               test_worker_failure_restarts_every_node_in_a_new_round,
//                                             test_recovery_dgt_run.py::
//                                               test_group_policy_restarts_every_rank_in_a_new_round
// SignalAfterOwnWorkersFinishedEndsAtOnce     test_elastic.py::
//                                               test_sigterm_after_own_workers_finished_exits_at_once
// JoinTimeout test_bad_input.py::test_join_timeout_when_too_few_nodes RefusedWhileJoining
// test_rendezvous_faults.py::
//                                               test_second_agent_with_the_same_node_id_is_refused
// RunEndedBeforeAdmission                     test_rendezvous_faults.py::
//                                               test_agent_waiting_beyond_max_is_not_admitted
// UnusedSpareOfASucceededRunExitsZero         test_spares.py::
//                                               test_two_spares_racing_for_one_lost_node
// StopFromTheServiceThenNoRound               (unit only: the service stops the workers)
// TooFewNodesAfterALossIsAJoinTimeout         (unit only: RunFinished.too_few_nodes)
// ServiceLostForGoodLeavesWith69              test_rendezvous_faults.py::
//                                               test_service_lost_for_good_stops_both_nodes_with_69
// RejoinRefusedLeavesWith69                   (unit only: a rejoin refused, an Error while running)
// FailureFromDoneMarks                        test_rendezvous_faults.py::
//                                               test_failure_from_done_marks_when_the_service_stays_away
// SignalWinsOverANewRound                     test_rendezvous_faults.py::
//                                               test_sigterm_to_every_agent_at_once_stops_each_with_143
// SignalDuringSpawn                           test_faults_and_logs.py::
//                                               test_sigterm_during_a_big_spawn_takes_effect_promptly
// DrainIsBounded                              (unit only: a descendant holding the pipes)
// ServiceLostWhileRunningReconnects           test_rendezvous_faults.py::
//                                               test_job_survives_a_restart_of_the_rendezvous_service
// SessionRefusedWhileJoining                  test_rendezvous_ops.py::test_bearer_token_is_required
// HostingNodeLost                             test_rendezvous_ops.py::
//                                               test_kill_9_of_the_hosting_agent_stops_the_others
// ReconnectWindowOver                         test_rendezvous_faults.py::
//                                               test_service_lost_for_good_stops_both_nodes_with_69,
//                                             test_rendezvous_faults.py::
//                                               test_outcome_from_done_marks_when_the_service_stays_away
// OutcomeFromDoneMarks                        test_rendezvous_faults.py::
//                                               test_outcome_from_done_marks_when_the_service_stays_away
// FailedMarkEndsTheRunWithoutTheService       test_rendezvous_faults.py::
//                                               test_failure_from_done_marks_when_the_service_stays_away
// AnotherNodesFailedMarkStopsTheWorkers       test_rendezvous_faults.py::
//                                               test_failure_from_done_marks_when_the_service_stays_away
// LingerUntilEveryMarkOrTheDeadline           test_rendezvous_faults.py::
//                                               test_outcome_from_done_marks_when_the_service_stays_away
//                                             (node rank 0 keeps the store until node rank 1
//                                             has seen the outcome; the deadline unit only)
// StaticTwoNodesSucceed                       test_supervision.py::test_static_backend_two_nodes
// StaticFailureOnTheOtherNode                 test_supervision.py::
//                                               test_static_backend_failure_stops_the_other_node
// StaticSignalWhileWaitingForTheOthers        test_supervision.py::
//                                               test_static_node_rank_0_stops_waiting_on_a_signal
// HealthFailureLeavesTheRun                   test_health.py::
//                                               test_check_failing_mid_run_leaves_the_run
// HealthFailureBeforeWorkersFinishesAtOnce    test_health.py::
//                                               test_check_failing_before_join_does_not_join
//                                             (the runtime checks before the join; unit here)
// HealthFailureAfterAnotherCauseOnlyLogs      (unit only: the first cause decides the status)
// StaticHealthFailureReportsTheNode           (unit only)
// StaticStartRefusedOrUnreachable             test_supervision.py::
//                                               test_static_second_agent_with_the_same_node_rank_is_refused,
//                                             test_supervision.py::
//                                               test_static_node_rank_1_without_node_rank_0_exits_69
#include "agent/lifecycle/node_lifecycle.h"

#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_process_launcher.h"

namespace dgt::agent {
namespace {

using ::testing::ElementsAre;

class FakeClock final : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

NodeLifecycle::Options BaseOptions() {
  NodeLifecycle::Options o;
  o.run_id = "job";
  o.node_id = "n0";
  o.rdzv_endpoint = "10.0.0.1:29400";
  o.advertised_address = "10.0.0.2";
  o.min_nodes = 1;
  o.nproc_per_node = 2;
  o.join_timeout_s = 600;
  o.stop_timeout_s = 30;
  return o;
}

RoundAssignment Round(int64_t round, int restart_count = 0, int node_rank = 0, int node_count = 1,
                      std::string reason = "initial") {
  RoundAssignment a;
  a.round = round;
  a.restart_count = restart_count;
  a.node_rank = node_rank;
  a.node_count = node_count;
  a.reason = std::move(reason);
  return a;
}

// A minimal runtime: carries the worker actions out on a FakeProcessLauncher (one process per
// local rank), feeds exits back, and returns every action as its DebugString, in order.
class Harness {
 public:
  explicit Harness(NodeLifecycle::Options options = BaseOptions(),
                   RoundAssignment static_round = {})
      : nproc_(options.nproc_per_node),
        static_round_(std::move(static_round)),
        lc_(std::move(options), &clock_) {}

  NodeLifecycle& lc() { return lc_; }
  FakeClock& clock() { return clock_; }
  FakeProcessLauncher& launcher() { return launcher_; }
  pid_t pid(int local_rank) const { return pids_.at(local_rank); }
  int alive() const {
    int n = 0;
    // As the WorkerGroup counts: a worker is alive until its exit was delivered.
    for (const auto& [pid, attempt] : attempts_) n += delivered_.count(pid) == 0 ? 1 : 0;
    return n;
  }
  // The last Report / PublishFailure action seen.
  const actions::Report& last_report() const { return last_report_; }
  const actions::PublishFailure& last_publish() const { return last_publish_; }

  std::vector<std::string> Do(const LifecycleActions& actions) {
    std::vector<std::string> out;
    for (const LifecycleAction& a : actions) {
      out.push_back(DebugString(a));
      std::vector<std::string> more = Carry(a);
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }

  // Joins and runs the first round: the workers start.
  void Start(const RoundAssignment& a = Round(0)) {
    lc_.OnJoinSent(clock_.Now());
    Do(lc_.OnAssignment(a, alive(), clock_.Now()));
    ASSERT_EQ(lc_.state(), NodeState::kRunning);
  }

  // Worker `local_rank` exits with `code` (or by `signal`); then every exit the launcher has
  // made since (signals the lifecycle's actions sent) reaches the lifecycle too.
  std::vector<std::string> Exit(int local_rank, int code, int signal = 0) {
    if (signal != 0) {
      launcher_.SignalGroup(pid(local_rank), signal);
    } else {
      launcher_.ExitWithCode(pid(local_rank), code);
    }
    return DeliverExits();
  }

  std::vector<std::string> DeliverExits() {
    std::vector<std::string> out;
    for (bool more = true; more;) {
      more = false;
      for (const auto& [local, pid] : pids_) {
        const auto& p = launcher_.process(pid);
        if (p.wait_status < 0 || delivered_.count(pid) > 0) continue;
        delivered_.insert(pid);
        WorkerExit e;
        e.local_rank = local;
        e.rank = first_rank_ + local;
        e.attempt = attempts_.at(pid);
        e.pid = pid;
        e.time = clock_.Now();
        if (WIFSIGNALED(p.wait_status)) {
          e.signal = WTERMSIG(p.wait_status);
        } else {
          e.exit_code = WEXITSTATUS(p.wait_status);
        }
        std::vector<std::string> acts = Do(lc_.OnWorkerExit(e, alive(), clock_.Now()));
        out.insert(out.end(), acts.begin(), acts.end());
        more = true;
        break;  // pids_ may have changed.
      }
    }
    return out;
  }

  // The failure publication of the last PublishFailure completes.
  std::vector<std::string> Published() {
    std::vector<std::string> out;
    const WorkerExit e = last_publish_.exit;
    if (lc_.OnFailurePublished(/*group_current=*/true)) {
      out.push_back(
          absl::StrCat("restart rank ", e.rank, " attempt ", last_publish_.restart_count));
      Launch(e.local_rank, last_publish_.restart_count);
    }
    std::vector<std::string> more = Do(lc_.OnWorkersIdle(alive(), clock_.Now()));
    out.insert(out.end(), more.begin(), more.end());
    return out;
  }

  std::vector<std::string> Drained() { return Do(lc_.OnDrained()); }
  std::vector<std::string> Tick() { return Do(lc_.OnTick(clock_.Now())); }

 private:
  void Launch(int local_rank, int attempt) {
    LaunchRequest r;
    r.argv = {"worker"};
    r.local_rank = local_rank;
    pid_t pid = launcher_.Launch(r)->pid;
    pids_[local_rank] = pid;
    attempts_[pid] = attempt;
  }

  std::vector<std::string> Carry(const LifecycleAction& action) {
    if (const auto* a = std::get_if<actions::ApplyAssignment>(&action)) {
      if (a->keep_workers) return {};  // The workers go on: only the round number changes.
      first_rank_ = (a->assignment ? a->assignment->node_rank : static_round_.node_rank) * nproc_;
      return Do(lc_.OnRoundApplied(a->assignment ? *a->assignment : static_round_));
    }
    if (const auto* a = std::get_if<actions::StartRound>(&action)) {
      pids_.clear();
      for (int local = 0; local < nproc_; ++local) Launch(local, a->restart_count);
      return Do(lc_.OnSpawnDone(alive(), clock_.Now()));
    }
    if (const auto* a = std::get_if<actions::StopWorkers>(&action)) {
      for (const auto& [local, pid] : pids_) {
        launcher_.SignalGroup(pid, a->signal == 0 ? SIGTERM : a->signal);
      }
      return {};
    }
    if (const auto* a = std::get_if<actions::ForwardSignal>(&action)) {
      for (const auto& [local, pid] : pids_) {
        launcher_.SignalGroup(pid, a->signal == 0 ? SIGTERM : a->signal);
      }
      return {};
    }
    if (std::holds_alternative<actions::KillWorkers>(action)) {
      for (const auto& [local, pid] : pids_) launcher_.SignalGroup(pid, SIGKILL);
      return {};
    }
    if (const auto* a = std::get_if<actions::PublishFailure>(&action)) last_publish_ = *a;
    if (const auto* a = std::get_if<actions::Report>(&action)) last_report_ = *a;
    return {};
  }

  FakeClock clock_;
  FakeProcessLauncher launcher_;
  int nproc_;
  RoundAssignment static_round_;
  NodeLifecycle lc_;
  int first_rank_ = 0;
  std::map<int, pid_t> pids_;  // Current process of each local rank.
  std::map<pid_t, int> attempts_;
  std::set<pid_t> delivered_;
  actions::Report last_report_;
  actions::PublishFailure last_publish_;
};

TEST(NodeLifecycleTest, StandaloneRunSucceeds) {
  Harness h;
  h.lc().OnJoinSent(h.clock().Now());
  EXPECT_EQ(h.lc().NextDeadline(), h.clock().Now() + absl::Seconds(600));
  EXPECT_THAT(h.Do(h.lc().OnAssignment(Round(0), 0, h.clock().Now())),
              ElementsAre("ApplyAssignment(round 0)", "StartRound(0)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().NextDeadline(), std::nullopt);  // The join deadline is over.
  EXPECT_THAT(h.Exit(0, 0), ElementsAre());
  EXPECT_THAT(h.Exit(1, 0), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_EQ(h.lc().state(), NodeState::kAwaitingOutcome);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
  EXPECT_THAT(h.Drained(), ElementsAre());  // Once.
  RunOutcome ok;
  ok.succeeded = true;
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(ok)), ElementsAre("Finish(0)"));
  EXPECT_EQ(h.lc().state(), NodeState::kDone);
}

std::string Who(int rank, pid_t pid, const std::string& what = "exited with code 3") {
  return absl::StrCat("rank ", rank, " (local rank ", rank % 2, " on node rank ", rank / 2,
                      ", 10.0.0.2, pid ", pid, ") ", what);
}

RunOutcome Failed(std::string node_id, int exit_code, std::string message = "m") {
  RunOutcome o;
  o.message = std::move(message);
  o.has_failure = true;
  o.failed_node_id = std::move(node_id);
  o.exit_code = exit_code;
  return o;
}

TEST(NodeLifecycleTest, WorkerFailureIsReportedWithItsCode) {
  Harness h;
  h.Start();
  EXPECT_THAT(h.Exit(1, 3),
              ElementsAre("RecordFailure(rank 1)",
                          "Log(error): rank 1 (local rank 1) exited with code 3; stopping the "
                          "other workers and reporting to the rendezvous",
                          "StopWorkers(SIGTERM)", "KillWorkers", "WatchDrain"));
  EXPECT_EQ(h.launcher().process(h.pid(0)).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(3, rank 1)"));
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(Failed("n0", 3))),
              ElementsAre(absl::StrCat("Finish(3, ", Who(1, 1001), ")")));
}

// Ranks declared hung in one reading are killed together and reaped in any order: the rank
// declared first (HangMonitor's blame order) is the root cause, reported and first in the
// summary, and the peer reaped before it stays named.
TEST(NodeLifecycleTest, HungRankDeclaredFirstIsTheRootCause) {
  Harness h;
  h.Start();
  auto hung = [](Harness& harness, int local_rank, int order) {
    WorkerExit e;
    e.local_rank = local_rank;
    e.rank = local_rank;
    e.pid = harness.pid(local_rank);
    e.signal = SIGKILL;
    e.hang_order = order;
    e.hung_at = harness.clock().Now() - absl::Seconds(order);
    e.time = harness.clock().Now();
    return e;
  };
  EXPECT_THAT(h.Do(h.lc().OnWorkerExit(hung(h, 0, 2), 1, h.clock().Now())),
              ElementsAre("RecordFailure(rank 0)",
                          "Log(error): rank 0 (local rank 0) was killed by signal 9 (SIGKILL); "
                          "stopping the other workers and reporting to the rendezvous",
                          "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.Do(h.lc().OnWorkerExit(hung(h, 1, 1), 0, h.clock().Now())),
              ElementsAre("RecordFailure(rank 1, root cause)", "KillWorkers", "WatchDrain"));
  EXPECT_EQ(h.lc().first_failure()->rank, 1);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(137, rank 1)"));
  // Across nodes the earliest failure is the root cause: a hung rank's is its declaration, not
  // its kill after the stack dump.
  EXPECT_EQ(h.last_report().failure->FailedAt(), h.clock().Now() - absl::Seconds(1));

  // Declared later than the first failure: named, not the root cause.
  Harness later;
  later.Start();
  EXPECT_THAT(later.Do(later.lc().OnWorkerExit(hung(later, 0, 1), 1, later.clock().Now())),
              ElementsAre("RecordFailure(rank 0)",
                          "Log(error): rank 0 (local rank 0) was killed by signal 9 (SIGKILL); "
                          "stopping the other workers and reporting to the rendezvous",
                          "StopWorkers(SIGTERM)"));
  EXPECT_THAT(later.Do(later.lc().OnWorkerExit(hung(later, 1, 2), 0, later.clock().Now())),
              ElementsAre("RecordFailure(rank 1)", "KillWorkers", "WatchDrain"));
  EXPECT_EQ(later.lc().first_failure()->rank, 0);
}

TEST(NodeLifecycleTest, FailureOnAnotherNodeStopsThisOne) {
  Harness h;
  h.Start(Round(0, 0, /*node_rank=*/1, /*node_count=*/2));
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(Failed("n1", 3, "rank 0 exited with code 3"))),
              ElementsAre("Log(error): run failed on another node: rank 0 exited with code 3; "
                          "stopping this node's workers",
                          "StopWorkers(SIGTERM)"));
  EXPECT_EQ(h.lc().state(), NodeState::kStopping);
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Finish(3, run failed: rank 0 exited with code 3)"));
}

TEST(NodeLifecycleTest, RootCauseOnAnotherNodeWins) {
  Harness h;
  h.Start();
  h.Exit(0, 1);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(1, rank 0)"));
  EXPECT_THAT(
      h.Do(h.lc().OnRunFinished(Failed("n1", 7))),
      ElementsAre(absl::StrCat("Log(warn): this node's ", Who(0, 1000, "exited with code 1"),
                               " followed the root cause on another node"),
                  "ClearFailures", "Finish(7, run failed: m)"));
}

TEST(NodeLifecycleTest, StopSignalIsForwardedThenFinishes128PlusN) {
  Harness h;
  h.Start();
  EXPECT_THAT(h.Do(h.lc().OnSignal(SIGTERM, true)),
              ElementsAre("InterruptCoordinator",
                          "Log(warn): received SIGTERM; forwarding it to the workers and stopping "
                          "(SIGKILL after 30 s)",
                          "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Finish(143, stopped by SIGTERM)"));
}

TEST(NodeLifecycleTest, NotifySignalIsForwardedWithoutStopping) {
  Harness h;
  h.Start();
  h.launcher().IgnoreSignal(h.pid(0), SIGUSR1);
  h.launcher().IgnoreSignal(h.pid(1), SIGUSR1);
  EXPECT_THAT(h.Do(h.lc().OnSignal(SIGUSR1, true)),
              ElementsAre("Log(info): received SIGUSR1; forwarding it to the workers",
                          "ForwardSignal(SIGUSR1)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.launcher().process(h.pid(1)).signals, std::vector<int>{SIGUSR1});
  EXPECT_EQ(h.alive(), 2);
}

TEST(NodeLifecycleTest, SecondSignalKillsTheWorkers) {
  Harness h;
  h.Start();
  h.launcher().IgnoreSignal(h.pid(0), SIGTERM);
  h.launcher().IgnoreSignal(h.pid(1), SIGTERM);
  h.Do(h.lc().OnSignal(SIGTERM, true));
  EXPECT_THAT(h.DeliverExits(), ElementsAre());
  EXPECT_THAT(
      h.Do(h.lc().OnSignal(SIGINT, true)),
      ElementsAre("Log(warn): second signal SIGINT; killing the workers now", "KillWorkers"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Finish(143, stopped by SIGTERM)"));
}

TEST(NodeLifecycleTest, GroupRestartIsANewRound) {
  NodeLifecycle::Options o = BaseOptions();
  o.max_restarts = 2;
  Harness h(o);
  h.Start();
  EXPECT_TRUE(h.lc().GroupRestartLeft());
  h.Exit(1, 3);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(3, rank 1)"));
  EXPECT_THAT(
      h.Do(h.lc().OnAssignment(Round(1, 1, 0, 1, "restart after failure"), 0, h.clock().Now())),
      ElementsAre("ClearFailures", "ApplyAssignment(round 1)", "StartRound(1)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().restart_count(), 1);
  EXPECT_EQ(h.lc().first_failure(), std::nullopt);
  EXPECT_EQ(h.pid(0), 1002);  // Every worker is a new process.
}

TEST(NodeLifecycleTest, GroupRestartExhaustedFails) {
  NodeLifecycle::Options o = BaseOptions();
  o.max_restarts = 1;
  Harness h(o);
  h.Start();
  h.Exit(1, 3);
  h.Drained();
  h.Do(h.lc().OnAssignment(Round(1, 1, 0, 1, "restart after failure"), 0, h.clock().Now()));
  EXPECT_FALSE(h.lc().GroupRestartLeft());
  h.Exit(1, 3);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(3, rank 1)"));
  EXPECT_EQ(h.lc().first_failure()->attempt, 1);
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(Failed("n0", 3))),
              ElementsAre(absl::StrCat("Finish(3, ", Who(1, 1003), ")")));
}

TEST(NodeLifecycleTest, StaticOneNodeGroupRestartIsLocal) {
  NodeLifecycle::Options o = BaseOptions();
  o.backend = RestartBackend::kStatic;
  o.max_restarts = 1;
  Harness h(o, Round(0));
  EXPECT_THAT(h.Do(h.lc().OnStaticStarted(true, false, "")),
              ElementsAre("ApplyAssignment(static)", "StartRound(0)"));
  EXPECT_THAT(h.Exit(1, 3),
              ElementsAre("RecordFailure(rank 1)",
                          "Log(warn): rank 1 (local rank 1) exited with code 3; restarting every "
                          "worker (restart 1 of --max-restarts=1)",
                          "StopWorkers(SIGTERM)", "KillWorkers", "StartRound(1)"));
  EXPECT_THAT(h.Exit(1, 3),
              ElementsAre("RecordFailure(rank 1)",
                          "Log(error): rank 1 (local rank 1) exited with code 3; --max-restarts=1 "
                          "exhausted; stopping the other workers",
                          "StopWorkers(SIGTERM)", "KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre(absl::StrCat("Report(3, rank 1, ", Who(1, 1003), ")")));
  EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
              ElementsAre(absl::StrCat("Finish(3, ", Who(1, 1003), ")")));
}

TEST(NodeLifecycleTest, RankRestartKeepsTheOthers) {
  NodeLifecycle::Options o = BaseOptions();
  o.restart_policy = RestartPolicy::kRank;
  o.max_restarts = 1;
  Harness h(o);
  h.Start();
  EXPECT_THAT(h.Exit(1, 3),
              ElementsAre("Log(warn): rank 1 (local rank 1) exited with code 3; restarting it",
                          "RecordFailure(rank 1, recovered)", "PublishFailure(rank 1, restart 1)"));
  EXPECT_THAT(h.Published(), ElementsAre("restart rank 1 attempt 1"));
  EXPECT_EQ(h.pid(0), 1000);  // The other rank's process is the same.
  EXPECT_EQ(h.pid(1), 1002);
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().restarts_used(), 1);
  // The budget is spent: the next failure fails the node.
  EXPECT_THAT(h.Exit(0, 3),
              ElementsAre("RecordFailure(rank 0)",
                          "Log(error): rank 0 (local rank 0) exited with code 3; --max-restarts=1 "
                          "exhausted; stopping the other workers",
                          "StopWorkers(SIGTERM)", "KillWorkers", "WatchDrain"));
}

TEST(NodeLifecycleTest, RankRestartStartFailureStops) {
  NodeLifecycle::Options o = BaseOptions();
  o.restart_policy = RestartPolicy::kRank;
  o.max_restarts = 1;
  Harness h(o);
  h.Start();
  h.Exit(1, 3);
  const WorkerExit failed = h.last_publish().exit;
  ASSERT_TRUE(h.lc().OnFailurePublished(/*group_current=*/true));
  // The replacement cannot be started.
  EXPECT_THAT(h.Do(h.lc().OnRankRestartFailed(failed)),
              ElementsAre("RecordFailure(rank 1)", "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.Do(h.lc().OnWorkersIdle(h.alive(), h.clock().Now())), ElementsAre());
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(3, rank 1)"));
}

TEST(NodeLifecycleTest, RankRestartAfterTheRoundStoppedIsNotStarted) {
  NodeLifecycle::Options o = BaseOptions();
  o.restart_policy = RestartPolicy::kRank;
  o.max_restarts = 1;
  Harness h(o);
  h.Start();
  h.Exit(1, 3);
  h.Do(h.lc().OnSignal(SIGTERM, true));
  // The last worker is gone, but the publication is pending: the round is not over yet.
  EXPECT_THAT(h.DeliverExits(), ElementsAre());
  EXPECT_THAT(h.Published(), ElementsAre("KillWorkers", "WatchDrain"));
}

TEST(NodeLifecycleTest, ShrinkDropsTheRank) {
  NodeLifecycle::Options o = BaseOptions();
  o.restart_policy = RestartPolicy::kRank;
  o.shrink = true;
  o.max_restarts = 1;
  Harness h(o);
  h.Start();
  EXPECT_THAT(h.Exit(1, 3),
              ElementsAre("Log(warn): rank 1 (local rank 1) exited with code 3; continuing "
                          "without it (--recovery-mode=shrink, 1 of --max-restarts=1)",
                          "PublishFailure(rank 1, drop 0)"));
  EXPECT_THAT(h.Exit(0, 0), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));  // Tolerated: the node succeeded.
}

TEST(NodeLifecycleTest, NewRoundWhileRunningRestartsTheWorkers) {
  Harness h;
  h.Start(Round(0, 0, 0, 2));
  EXPECT_THAT(h.Do(h.lc().OnAssignment(Round(1, 0, 0, 1, "node lost"), h.alive(), h.clock().Now())),
              ElementsAre("Log(warn): run 'job' moves to round 1 (node lost); stopping this "
                          "node's workers",
                          "ClearFailures", "StopWorkers(SIGTERM)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRerounding);
  EXPECT_EQ(h.lc().pending_assignment()->round, 1);
  EXPECT_THAT(h.DeliverExits(),
              ElementsAre("KillWorkers", "ApplyAssignment(round 1)", "StartRound(0)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().round(), 1);
}

RoundAssignment InPlace(RoundAssignment a) {
  a.in_place = true;
  return a;
}

TEST(NodeLifecycleTest, InPlaceRoundKeepsTheRunningWorkers) {
  Harness h;
  h.Start(Round(0, 0, 1, 2));
  const pid_t first = h.pid(0);
  EXPECT_THAT(h.Do(h.lc().OnAssignment(InPlace(Round(1, 0, 1, 2, "node lost")), h.alive(),
                                       h.clock().Now())),
              ElementsAre("Log(info): run 'job' moves to round 1 (node lost); this node's "
                          "workers go on",
                          "ApplyAssignment(round 1, keep workers)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().round(), 1);
  EXPECT_EQ(h.pid(0), first);
  EXPECT_EQ(h.alive(), 2);
  // The workers' success is reported for the new round.
  h.Exit(0, 0);
  EXPECT_THAT(h.Exit(1, 0), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
  EXPECT_EQ(h.lc().round(), 1);
}

TEST(NodeLifecycleTest, SpareJoiningAnInPlaceRoundStartsItsRanksAsReplacements) {
  Harness h;
  h.lc().OnJoinSent(h.clock().Now());
  EXPECT_THAT(
      h.Do(h.lc().OnAssignment(InPlace(Round(3, 1, 1, 2, "node lost")), 0, h.clock().Now())),
      ElementsAre("ApplyAssignment(round 3)", "StartRound(2, replacing)"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);
  EXPECT_EQ(h.lc().round(), 3);
}

TEST(NodeLifecycleTest, InPlaceRoundThatDoesNotMatchThisNodeRestartsItsRanksAsReplacements) {
  Harness h;
  h.Start(Round(0, 0, 1, 2));
  // Another node rank: not this node's running round, so its workers stop first.
  EXPECT_THAT(h.Do(h.lc().OnAssignment(InPlace(Round(1, 0, 0, 2, "node lost")), h.alive(),
                                       h.clock().Now())),
              ElementsAre("Log(warn): run 'job' moves to round 1 (node lost); stopping this "
                          "node's workers",
                          "ClearFailures", "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(),
              ElementsAre("KillWorkers", "ApplyAssignment(round 1)", "StartRound(1, replacing)"));
  EXPECT_EQ(h.lc().round(), 1);
}

TEST(NodeLifecycleTest, FailureRestartsEveryNodeInANewRound) {
  NodeLifecycle::Options o = BaseOptions();
  o.max_restarts = 1;
  Harness h(o);
  h.Start(Round(0, 0, 1, 2));
  // Another node's worker failed: the service restarts every node in round 1.
  h.Do(h.lc().OnAssignment(Round(1, 1, 1, 2, "restart after failure"), h.alive(), h.clock().Now()));
  // A worker stopped by the round's change is not a failure of this node.
  EXPECT_THAT(h.DeliverExits(),
              ElementsAre("KillWorkers", "ApplyAssignment(round 1)", "StartRound(1)"));
  EXPECT_EQ(h.lc().first_failure(), std::nullopt);
  EXPECT_FALSE(h.lc().GroupRestartLeft());
}

TEST(NodeLifecycleTest, SignalAfterOwnWorkersFinishedEndsAtOnce) {
  Harness h;
  h.Start();
  h.Exit(0, 0);
  h.Exit(1, 0);
  h.Drained();
  EXPECT_THAT(h.Do(h.lc().OnSignal(SIGTERM, true)),
              ElementsAre("Finish(143, stopped by SIGTERM after this node's workers exited, "
                          "before the run's outcome was known)"));
}

TEST(NodeLifecycleTest, JoinTimeout) {
  NodeLifecycle::Options o = BaseOptions();
  o.min_nodes = 2;
  Harness h(o);
  h.lc().OnJoinSent(h.clock().Now());
  h.lc().OnProgress(1, /*spare=*/false, h.clock().Now());
  h.clock().Advance(absl::Seconds(599));
  EXPECT_THAT(h.Tick(), ElementsAre());
  h.clock().Advance(absl::Seconds(1));
  EXPECT_THAT(h.Tick(), ElementsAre("Finish(75, rendezvous for run 'job' did not complete within "
                                    "600 s (--join-timeout): 1 of at least 2 node(s) joined)"));
  EXPECT_EQ(h.lc().NextDeadline(), std::nullopt);
}

// A hot spare waits beside the running round for as long as the run runs, past the join
// timeout (a spare of a job that ran longer than 600 s exited 75 and was lost as a spare). When
// the service stops calling it a spare (the run gathers again), the join timeout counts again.
TEST(NodeLifecycleTest, AHotSpareWaitsPastTheJoinTimeout) {
  NodeLifecycle::Options o = BaseOptions();
  o.min_nodes = 2;
  Harness h(o);
  h.lc().OnJoinSent(h.clock().Now());
  h.lc().OnProgress(3, /*spare=*/true, h.clock().Now());
  EXPECT_EQ(h.lc().NextDeadline(), std::nullopt);
  h.clock().Advance(absl::Hours(5));
  EXPECT_THAT(h.Tick(), ElementsAre());
  h.lc().OnProgress(1, /*spare=*/false, h.clock().Now());
  EXPECT_EQ(h.lc().NextDeadline(), h.clock().Now() + absl::Seconds(600));
  h.clock().Advance(absl::Seconds(600));
  EXPECT_THAT(h.Tick(), ElementsAre("Finish(75, rendezvous for run 'job' did not complete within "
                                    "600 s (--join-timeout): 1 of at least 2 node(s) joined)"));
}

TEST(NodeLifecycleTest, RefusedWhileJoining) {
  Harness h;
  EXPECT_THAT(h.Do(h.lc().OnRefused("node id 'n0' is already in run 'job'", false, 0)),
              ElementsAre("Finish(77, the rendezvous service refused this node: node id 'n0' is "
                          "already in run 'job')"));
}

TEST(NodeLifecycleTest, RunEndedBeforeAdmission) {
  Harness h;
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(Failed("n1", 1, "x"))),
              ElementsAre("Finish(77, run 'job' ended (failed: x) before node 'n0' was admitted "
                          "to it)"));
}

// A hot spare the run never needed: the service tells it the run's success, and it exits 0.
TEST(NodeLifecycleTest, UnusedSpareOfASucceededRunExitsZero) {
  Harness h;
  h.lc().OnJoinSent(h.clock().Now());
  RunOutcome ok;
  ok.succeeded = true;
  ok.message = "all 2 nodes succeeded";
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(ok)),
              ElementsAre("Finish(0, run 'job' succeeded (all 2 nodes succeeded) without node "
                          "'n0': it waited as a spare and was not needed)"));
}

TEST(NodeLifecycleTest, StopFromTheServiceThenNoRound) {
  Harness h;
  h.Start();
  const absl::Time stopped = h.clock().Now();
  EXPECT_THAT(h.Do(h.lc().OnStop("too few nodes", h.alive(), stopped)),
              ElementsAre("Log(warn): the rendezvous stopped this node's workers: too few nodes",
                          "ClearFailures", "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers"));
  EXPECT_EQ(h.lc().state(), NodeState::kWaitingForRound);
  EXPECT_EQ(h.lc().NextDeadline(), stopped + absl::Seconds(600));
  h.clock().Advance(absl::Seconds(600));
  EXPECT_THAT(h.Tick(), ElementsAre("Finish(75, run 'job' got no new round within 600 s after "
                                    "its workers were stopped)"));
}

// The service ends the run for want of MIN nodes after losing nodes: a join timeout (75, which
// schedulers retry) for the survivor, whether its workers are gone or still stopping, and for a
// node that waited to join, not a failure of the job's code (1).
TEST(NodeLifecycleTest, TooFewNodesAfterALossIsAJoinTimeout) {
  RunOutcome too_few;
  too_few.message = "run 'job' had only 1 of at least 2 nodes for 10s after losing nodes";
  too_few.too_few_nodes = true;
  const std::string finish =
      "Finish(75, run failed: run 'job' had only 1 of at least 2 nodes for 10s after losing "
      "nodes)";
  Harness h;
  h.Start();
  h.Do(h.lc().OnStop("node 'n1' was lost", h.alive(), h.clock().Now()));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers"));
  ASSERT_EQ(h.lc().state(), NodeState::kWaitingForRound);
  EXPECT_THAT(h.Do(h.lc().OnRunFinished(too_few)), ElementsAre(finish));

  Harness stopping;
  stopping.Start();
  stopping.Do(stopping.lc().OnStop("node 'n1' was lost", stopping.alive(), stopping.clock().Now()));
  EXPECT_THAT(stopping.Do(stopping.lc().OnRunFinished(too_few)),
              ElementsAre("Log(error): run failed: run 'job' had only 1 of at least 2 nodes for "
                          "10s after losing nodes; stopping this node's workers"));
  EXPECT_THAT(stopping.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(stopping.Drained(), ElementsAre(finish));

  Harness joining;
  joining.lc().OnJoinSent(joining.clock().Now());
  EXPECT_THAT(joining.Do(joining.lc().OnRunFinished(too_few)), ElementsAre(finish));
}

// SIGTERM to every agent at once (scancel): a node whose workers the service stopped, because
// the other node left first, ends with 143 and says it was stopped, not "before workers started".
TEST(NodeLifecycleTest, SignalWhileWaitingForTheNextRoundSaysStopped) {
  Harness h;
  h.Start();
  h.Do(h.lc().OnStop("node 'n1' was lost", h.alive(), h.clock().Now()));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers"));
  ASSERT_EQ(h.lc().state(), NodeState::kWaitingForRound);
  EXPECT_THAT(h.Do(h.lc().OnSignal(SIGTERM, true)), ElementsAre("Finish(143, stopped by SIGTERM)"));
}

TEST(NodeLifecycleTest, ServiceLostForGoodLeavesWith69) {
  Harness h;
  h.Start();
  EXPECT_THAT(
      h.Do(h.lc().LeaveRun(69, "lost", h.alive())),
      ElementsAre("Log(error): lost; stopping this node's workers", "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("MarkDone(69)", "Linger(69, lost)"));
  // Workers gone already: straight to the linger.
  Harness idle;
  idle.Start();
  idle.Exit(0, 0);
  idle.Exit(1, 0);
  EXPECT_THAT(idle.Do(idle.lc().LeaveRun(69, "lost", 0)), ElementsAre("Linger(69, lost)"));
}

TEST(NodeLifecycleTest, RejoinRefusedLeavesWith69) {
  Harness h;
  h.Start();
  EXPECT_THAT(h.Do(h.lc().OnRefused("run moved on", /*rejoin=*/true, h.alive())),
              ElementsAre("Log(error): lost the rendezvous service at 10.0.0.1:29400 and could "
                          "not rejoin run 'job': run moved on; stopping this node's workers",
                          "StopWorkers(SIGTERM)"));
  Harness other;
  other.Start();
  EXPECT_THAT(other.Do(other.lc().OnRefused("gone", /*rejoin=*/false, other.alive())),
              ElementsAre("Log(error): the rendezvous service ended the part of node 'n0' in run "
                          "'job': gone; stopping this node's workers",
                          "StopWorkers(SIGTERM)"));
}

TEST(NodeLifecycleTest, FailureFromDoneMarks) {
  Harness h;
  h.Start(Round(0, 0, 1, 2));
  EXPECT_THAT(h.Do(h.lc().OnMarksFailure(0, 3)),
              ElementsAre("Log(error): the workers of node rank 0 ended with exit status 3 (done "
                          "marks in the round's store; the rendezvous service is unreachable); "
                          "stopping this node's workers",
                          "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("MarkDone(0)", "PollMarks"));
}

TEST(NodeLifecycleTest, SignalWinsOverANewRound) {
  Harness h;
  h.Start();
  h.Do(h.lc().OnSignal(SIGTERM, true));
  EXPECT_THAT(h.Do(h.lc().OnAssignment(Round(1, 0, 0, 1, "node lost"), 2, h.clock().Now())),
              ElementsAre("Log(info): ignoring a new round from the rendezvous (node lost): this "
                          "node is stopping (SIGTERM)"));
  EXPECT_THAT(h.Do(h.lc().OnStop("x", 2, h.clock().Now())),
              ElementsAre("Log(info): ignoring a stop of this node's workers from the rendezvous "
                          "(x): this node is stopping (SIGTERM)"));
  EXPECT_THAT(h.Do(h.lc().LeaveRun(69, "lost", 2)),
              ElementsAre("Log(info): lost; this node is stopping anyway (SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Finish(143, stopped by SIGTERM)"));
}

TEST(NodeLifecycleTest, SignalDuringSpawn) {
  FakeClock clock;
  NodeLifecycle lc(BaseOptions(), &clock);
  lc.OnJoinSent(clock.Now());
  lc.OnAssignment(Round(0), 0, clock.Now());
  lc.OnRoundApplied(Round(0));
  // StartRound: local rank 0 is started, local rank 1 not yet.
  Harness h;
  EXPECT_THAT(h.Do(lc.OnSignal(SIGTERM, true)),
              ElementsAre("InterruptCoordinator",
                          "Log(warn): received SIGTERM; forwarding it to the workers and stopping "
                          "(SIGKILL after 30 s)",
                          "StopWorkers(SIGTERM)"));
  WorkerExit e;
  e.signal = SIGTERM;
  EXPECT_THAT(h.Do(lc.OnWorkerExit(e, 0, clock.Now())), ElementsAre());  // Still spawning.
  EXPECT_THAT(h.Do(lc.OnSpawnDone(0, clock.Now())), ElementsAre("KillWorkers", "WatchDrain"));
}

TEST(NodeLifecycleTest, DrainIsBounded) {
  Harness h;
  h.Start();
  h.Exit(0, 0);
  h.Exit(1, 0);
  EXPECT_EQ(h.lc().NextDeadline(), h.clock().Now() + absl::Seconds(2));
  h.clock().Advance(absl::Seconds(1));
  EXPECT_THAT(h.Tick(), ElementsAre());
  h.clock().Advance(absl::Seconds(1));
  EXPECT_THAT(h.Tick(), ElementsAre("Report(0)"));
  EXPECT_THAT(h.Drained(), ElementsAre());  // The output came late: reported once.
  EXPECT_EQ(h.lc().NextDeadline(), std::nullopt);
}

NodeLifecycle::Options StaticOptions() {
  NodeLifecycle::Options o = BaseOptions();
  o.backend = RestartBackend::kStatic;
  return o;
}

TEST(NodeLifecycleTest, StaticTwoNodesSucceed) {
  Harness h(StaticOptions(), Round(0, 0, 1, 2));
  EXPECT_THAT(h.Do(h.lc().OnStaticStarted(true, false, "")),
              ElementsAre("ApplyAssignment(static)", "StartRound(0)"));
  h.Exit(0, 0);
  EXPECT_THAT(h.Exit(1, 0), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
  EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
              ElementsAre("Finish(0, this node's workers succeeded (node rank 1); node rank 0 "
                          "reports the run's outcome)"));
  Harness rank0(StaticOptions(), Round(0, 0, 0, 2));
  rank0.Do(rank0.lc().OnStaticStarted(true, false, ""));
  rank0.Exit(0, 0);
  rank0.Exit(1, 0);
  rank0.Drained();
  EXPECT_THAT(rank0.Do(rank0.lc().OnStaticOutcome(true, "")), ElementsAre("Finish(0)"));
}

TEST(NodeLifecycleTest, StaticFailureOnTheOtherNode) {
  Harness h(StaticOptions(), Round(0, 0, 1, 2));
  h.Do(h.lc().OnStaticStarted(true, false, ""));
  EXPECT_THAT(h.Do(h.lc().OnStaticRemoteFailure(3, "node rank 0 failed")),
              ElementsAre("Log(error): run failed on another node: node rank 0 failed; stopping "
                          "this node's workers",
                          "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
  EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
              ElementsAre("Finish(3, run failed: node rank 0 failed)"));
  // Heard while this node's own report is pending: the report's answer ends the run.
  Harness late(StaticOptions(), Round(0, 0, 0, 2));
  late.Do(late.lc().OnStaticStarted(true, false, ""));
  late.Exit(0, 0);
  late.Exit(1, 0);
  EXPECT_THAT(late.Do(late.lc().OnStaticRemoteFailure(1, "node rank 1 failed")), ElementsAre());
  late.Drained();
  EXPECT_THAT(late.Do(late.lc().OnStaticOutcome(true, "")),
              ElementsAre("Finish(1, run failed: node rank 1 failed)"));
}

TEST(NodeLifecycleTest, StaticSignalWhileWaitingForTheOthers) {
  Harness h(StaticOptions(), Round(0, 0, 0, 2));
  h.Do(h.lc().OnStaticStarted(true, false, ""));
  h.Exit(0, 0);
  h.Exit(1, 0);
  EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
  EXPECT_THAT(h.Do(h.lc().OnSignal(SIGINT, true)),
              ElementsAre("Finish(130, stopped by SIGINT after this node's workers exited, "
                          "before the run's outcome was known)"));
  // Stopped while its workers ran: the report says so.
  Harness running(StaticOptions(), Round(0, 0, 0, 2));
  running.Do(running.lc().OnStaticStarted(true, false, ""));
  running.Do(running.lc().OnSignal(SIGTERM, true));
  running.DeliverExits();
  EXPECT_THAT(running.Drained(), ElementsAre("Report(143, SIGTERM, stopped by SIGTERM)"));
  EXPECT_THAT(running.Do(running.lc().OnStaticOutcome(false, "store gone")),
              ElementsAre("Finish(143, stopped by SIGTERM)"));
}

// A scheduler's cancel reaches the nodes one by one: another node's stop by its signal, heard
// just before this node's own signal, is no failure of the run; the signal decides (143, not 1).
// Another node's failure heard first still decides.
TEST(NodeLifecycleTest, StaticStopOfAnotherNodeThenThisNodesSignal) {
  for (bool stopped : {true, false}) {
    const std::string cause =
        stopped ? "node rank 0 was stopped by SIGTERM" : "node rank 0 failed with exit code 1";
    Harness h(StaticOptions(), Round(0, 0, 1, 2));
    h.Do(h.lc().OnStaticStarted(true, false, ""));
    EXPECT_THAT(h.Do(h.lc().OnStaticRemoteFailure(1, cause, stopped)),
                ElementsAre("Log(error): run failed on another node: " + cause +
                                "; stopping this node's workers",
                            "StopWorkers(SIGTERM)"));
    EXPECT_THAT(h.Do(h.lc().OnSignal(SIGTERM, true)),
                ElementsAre("InterruptCoordinator",
                            "Log(warn): received SIGTERM; forwarding it to the workers and "
                            "stopping (SIGKILL after 30 s)",
                            "StopWorkers(SIGTERM)"));
    EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
    if (stopped) {
      EXPECT_THAT(h.Drained(), ElementsAre("Report(143, SIGTERM, stopped by SIGTERM)"));
      EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
                  ElementsAre("Finish(143, stopped by SIGTERM)"));
    } else {
      EXPECT_THAT(h.Drained(), ElementsAre("Report(0)"));
      EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
                  ElementsAre("Finish(1, run failed: " + cause + ")"));
    }
  }
}

TEST(NodeLifecycleTest, StaticStartRefusedOrUnreachable) {
  Harness refused(StaticOptions());
  EXPECT_THAT(refused.Do(refused.lc().OnStaticStarted(false, true, "node rank 1 is taken")),
              ElementsAre("Finish(77, static rendezvous: node rank 1 is taken)"));
  Harness unreachable(StaticOptions());
  EXPECT_THAT(unreachable.Do(unreachable.lc().OnStaticStarted(false, false, "timed out")),
              ElementsAre("Finish(69, static rendezvous: timed out (is node rank 0 running? see "
                          "--rdzv-connect-timeout))"));
  Harness joining(StaticOptions());
  EXPECT_THAT(joining.Do(joining.lc().OnSignal(SIGTERM, false)),
              ElementsAre("Finish(143, stopped by SIGTERM before workers started)"));
}

TEST(NodeLifecycleTest, HealthFailureLeavesTheRun) {
  Harness h;
  h.Start();
  EXPECT_THAT(
      h.Do(h.lc().OnHealthFailed("health check 'gpu' failed: exited with code 1: bad", true)),
      ElementsAre("InterruptCoordinator",
                  "Log(error): health check 'gpu' failed: exited with code 1: bad; this "
                  "node leaves the run: stopping its workers (SIGKILL after 30 s)",
                  "LeaveSession", "StopWorkers(SIGTERM)"));
  EXPECT_TRUE(h.lc().unhealthy());
  // A new round while the workers stop is not taken (the node leaves).
  EXPECT_THAT(h.Do(h.lc().OnAssignment(Round(1, 0, 0, 2, "node lost"), h.alive(), h.clock().Now())),
              ElementsAre("Log(info): ignoring a new round from the rendezvous (node lost): this "
                          "node is stopping (unhealthy)"));
  // No report: the session ends with the agent, and the service counts the node as lost.
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(),
              ElementsAre("Finish(71, health check 'gpu' failed: exited with code 1: bad)"));
}

TEST(NodeLifecycleTest, HealthFailureBeforeWorkersFinishesAtOnce) {
  Harness joining;
  joining.lc().OnJoinSent(joining.clock().Now());
  EXPECT_THAT(joining.Do(joining.lc().OnHealthFailed("health check 'shm' failed: full", false)),
              ElementsAre("Finish(71, health check 'shm' failed: full)"));
  EXPECT_EQ(joining.lc().state(), NodeState::kDone);
  EXPECT_THAT(joining.Do(joining.lc().OnHealthFailed("again", false)), ElementsAre());
}

TEST(NodeLifecycleTest, HealthFailureAfterAnotherCauseOnlyLogs) {
  Harness signalled;
  signalled.Start();
  signalled.Do(signalled.lc().OnSignal(SIGTERM, true));
  EXPECT_THAT(signalled.Do(signalled.lc().OnHealthFailed("health check 'x' failed: y", true)),
              ElementsAre("Log(warn): health check 'x' failed: y; this node is stopping already"));
  signalled.DeliverExits();
  EXPECT_THAT(signalled.Drained(), ElementsAre("Finish(143, stopped by SIGTERM)"));
  // The workers are done and reported: the run's outcome decides, not the check.
  Harness done;
  done.Start();
  done.Exit(0, 0);
  done.Exit(1, 0);
  EXPECT_THAT(done.Drained(), ElementsAre("Report(0)"));
  EXPECT_THAT(done.Do(done.lc().OnHealthFailed("health check 'x' failed: y", true)),
              ElementsAre("Log(warn): health check 'x' failed: y; this node's workers are done "
                          "already"));
  EXPECT_EQ(done.lc().state(), NodeState::kAwaitingOutcome);
  // A signal after the health failure kills the workers; the status stays the health check's.
  Harness second;
  second.Start();
  second.launcher().IgnoreSignal(second.pid(0), SIGTERM);
  second.launcher().IgnoreSignal(second.pid(1), SIGTERM);
  second.Do(second.lc().OnHealthFailed("health check 'x' failed: y", true));
  EXPECT_THAT(
      second.Do(second.lc().OnSignal(SIGINT, true)),
      ElementsAre("Log(warn): second signal SIGINT; killing the workers now", "KillWorkers"));
  second.DeliverExits();
  EXPECT_THAT(second.Drained(), ElementsAre("Finish(71, health check 'x' failed: y)"));
}

TEST(NodeLifecycleTest, StaticHealthFailureReportsTheNode) {
  Harness h(StaticOptions(), Round(0, 0, 0, 2));
  h.Do(h.lc().OnStaticStarted(true, false, ""));
  h.Do(h.lc().OnHealthFailed("health check 'x' failed: y", true));
  h.DeliverExits();
  // Reported as unhealthy: the others fail naming this node with 1, not with its 71.
  EXPECT_THAT(h.Drained(), ElementsAre("Report(71, unhealthy, health check 'x' failed: y)"));
  EXPECT_THAT(h.Do(h.lc().OnStaticOutcome(true, "")),
              ElementsAre("Finish(71, health check 'x' failed: y)"));
}

SessionEnd Lost(std::optional<std::string> host_lost = std::nullopt, bool lingering = false) {
  SessionEnd end;
  end.error = "Socket closed";
  end.host_lost = std::move(host_lost);
  end.lingering = lingering;
  return end;
}

TEST(NodeLifecycleTest, ServiceLostWhileRunningReconnects) {
  Harness h;
  h.Start();
  EXPECT_THAT(h.Do(h.lc().OnSessionClosed(Lost(), h.alive())), ElementsAre("Reconnect"));
  EXPECT_EQ(h.lc().state(), NodeState::kRunning);  // The workers keep running.
  // After the run's outcome the service ends the session itself: nothing was lost.
  h.Do(h.lc().OnRunFinished(Failed("n1", 3)));
  EXPECT_THAT(h.Do(h.lc().OnSessionClosed(Lost(), h.alive())), ElementsAre());
  // Stopping for a signal: the service is not needed any more.
  Harness signalled;
  signalled.Start();
  signalled.Do(signalled.lc().OnSignal(SIGTERM, true));
  EXPECT_THAT(signalled.Do(signalled.lc().OnSessionClosed(Lost(), 2)), ElementsAre());
}

TEST(NodeLifecycleTest, SessionRefusedWhileJoining) {
  Harness h;
  SessionEnd refused = Lost();
  refused.refused = true;
  refused.error = "missing or wrong bearer token";
  EXPECT_THAT(h.Do(h.lc().OnSessionClosed(refused, 0)),
              ElementsAre("Finish(77, the rendezvous session at 10.0.0.1:29400 ended before this "
                          "node was assigned: missing or wrong bearer token)"));
  Harness unreachable;
  EXPECT_THAT(unreachable.Do(unreachable.lc().OnSessionClosed(Lost(), 0)),
              ElementsAre("Reconnect"));  // The join timeout still bounds the wait.
}

TEST(NodeLifecycleTest, HostingNodeLost) {
  Harness h;
  h.Start();
  EXPECT_THAT(
      h.Do(h.lc().OnSessionClosed(Lost("host gone"), h.alive())),
      ElementsAre("Log(error): host gone; stopping this node's workers", "StopWorkers(SIGTERM)"));
  EXPECT_THAT(h.DeliverExits(), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(h.Drained(), ElementsAre("MarkDone(69)", "Linger(69, host gone)"));
  // Its own workers failed first: that failure is the exit status.
  Harness failed;
  failed.Start();
  failed.Exit(1, 3);
  failed.Drained();
  EXPECT_THAT(failed.Do(failed.lc().OnSessionClosed(Lost("host gone"), 0)),
              ElementsAre(absl::StrCat("Finish(3, ", Who(1, 1001), ")")));
  // Already lingering: decided.
  EXPECT_THAT(failed.Do(failed.lc().OnSessionClosed(Lost("host gone", true), 0)), ElementsAre());
}

TEST(NodeLifecycleTest, ReconnectWindowOver) {
  const std::string lost =
      "lost the rendezvous service at 10.0.0.1:29400 and could not reach it again within 60 s "
      "(--rdzv-conf read_timeout)";
  Harness running;
  running.Start();
  EXPECT_THAT(running.Do(running.lc().OnReconnectWindowOver(false, std::nullopt, 2)),
              ElementsAre(absl::StrCat("Log(error): ", lost, "; stopping this node's workers"),
                          "StopWorkers(SIGTERM)"));
  Harness joining;
  EXPECT_THAT(joining.Do(joining.lc().OnReconnectWindowOver(false, std::nullopt, 0)),
              ElementsAre(absl::StrCat("Finish(69, ", lost, ")")));
  // Workers done: the done marks name the failed node.
  Harness marked;
  marked.Start(Round(0, 0, 1, 2));
  marked.Exit(0, 0);
  marked.Exit(1, 0);
  marked.Drained();
  EXPECT_THAT(marked.Do(marked.lc().OnReconnectWindowOver(false, MarkedFailure{0, 3}, 0)),
              ElementsAre(absl::StrCat("Linger(3, run 'job' failed: the workers of node rank 0 "
                                       "ended with exit status 3 (done marks in the round's "
                                       "store; ",
                                       lost, "))")));
  EXPECT_THAT(marked.Do(marked.lc().OnReconnectWindowOver(false, std::nullopt, 0)),
              ElementsAre(absl::StrCat("Linger(69, ", lost,
                                       "; this node's workers succeeded, but the outcome of run "
                                       "'job' is unknown)")));
  EXPECT_THAT(marked.Do(marked.lc().OnReconnectWindowOver(true, std::nullopt, 0)), ElementsAre());
}

MarksView Marks(bool all_done, int failed = -1, int failed_status = 0, bool seen = false) {
  MarksView m;
  m.all_done = all_done;
  m.all_succeeded = all_done && failed < 0;
  m.first_worker_failure = failed;
  m.first_worker_failure_status = failed_status;
  m.seen_by_others = seen;
  return m;
}

// `h` runs node rank `node_rank` of 2, whose workers succeeded: it awaits the outcome.
void AwaitOutcome(Harness& h, int node_rank = 1) {
  h.Start(Round(0, 0, node_rank, 2));
  h.Exit(0, 0);
  h.Exit(1, 0);
  h.Drained();
  EXPECT_EQ(h.lc().state(), NodeState::kAwaitingOutcome);
}

TEST(NodeLifecycleTest, OutcomeFromDoneMarks) {
  Harness h;
  AwaitOutcome(h);
  EXPECT_THAT(h.Do(h.lc().OnMarks(std::nullopt, true, h.clock().Now())),
              ElementsAre("PollMarksLater"));  // None read yet.
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false), true, h.clock().Now())),
              ElementsAre("PollMarksLater"));  // Node rank 0 not done yet.
  // The service is back: it tells the outcome, the marks are not needed.
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), false, h.clock().Now())), ElementsAre());
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, h.clock().Now())),
              ElementsAre("FinishFromMarks(0, every node of run 'job' succeeded, as the done "
                          "marks in the round's store say (the rendezvous service at "
                          "10.0.0.1:29400 is unreachable))"));
}

TEST(NodeLifecycleTest, RejoinsBeforeTrustingSuccessfulMarks) {
  // The leader replica died just before the workers ended: every done mark says success, but the
  // replica taking over may have another node back already and would fail the run without this
  // one. The node tries to rejoin for rejoin_before_marks (10 s) before it trusts the marks.
  const std::string from_marks =
      "FinishFromMarks(0, every node of run 'job' succeeded, as the done marks in the round's "
      "store say (the rendezvous service at 10.0.0.1:29400 is unreachable))";
  Harness h;
  AwaitOutcome(h);
  const absl::Time now = h.clock().Now();
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, now, absl::ZeroDuration())),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, now, absl::Milliseconds(9999))),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, now, absl::Seconds(10))),
              ElementsAre(from_marks));
  // Node rank 0 too.
  Harness zero;
  AwaitOutcome(zero, 0);
  EXPECT_THAT(zero.Do(zero.lc().OnMarks(Marks(true), true, now, absl::Seconds(3))),
              ElementsAre("PollMarksLater"));
  // A shorter read timeout bounds the wait.
  NodeLifecycle::Options quick = BaseOptions();
  quick.reconnect_timeout_s = 4;
  Harness q(quick);
  AwaitOutcome(q);
  EXPECT_THAT(q.Do(q.lc().OnMarks(Marks(true), true, now, absl::Milliseconds(3999))),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(q.Do(q.lc().OnMarks(Marks(true), true, now, absl::Seconds(4))),
              ElementsAre(from_marks));
}

TEST(NodeLifecycleTest, FailedMarkEndsTheRunWithoutTheService) {
  const std::string marks =
      " (done marks in the round's store; the rendezvous service at 10.0.0.1:29400 is "
      "unreachable)";
  Harness h;
  AwaitOutcome(h);
  // Node rank 0's agent gave up on the service (69): not a worker failure, the outcome is not
  // known.
  MarksView gave_up = Marks(true);
  gave_up.all_succeeded = false;
  EXPECT_THAT(h.Do(h.lc().OnMarks(gave_up, true, h.clock().Now())), ElementsAre("PollMarksLater"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true, 0, 3), true, h.clock().Now())),
              ElementsAre(absl::StrCat("FinishFromMarks(3, run 'job' failed: the workers of node "
                                       "rank 0 ended with exit status 3",
                                       marks, ")")));
  // This node's own failure is the one it names.
  Harness own;
  own.Start(Round(0, 0, 1, 2));
  own.Exit(1, 3);
  own.Drained();
  EXPECT_THAT(own.Do(own.lc().OnMarks(Marks(true, 1, 3), true, own.clock().Now())),
              ElementsAre(absl::StrCat("FinishFromMarks(3, ", Who(3, 1001), marks, ")")));
  // A group restart left: a service coming back would start one; wait for it.
  NodeLifecycle::Options restartable = BaseOptions();
  restartable.max_restarts = 1;
  Harness left(restartable);
  AwaitOutcome(left);
  EXPECT_THAT(left.Do(left.lc().OnMarks(Marks(true, 0, 3), true, left.clock().Now())),
              ElementsAre("PollMarksLater"));
}

TEST(NodeLifecycleTest, AnotherNodesFailedMarkStopsTheWorkers) {
  Harness h;
  h.Start(Round(0, 0, 1, 2));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false), true, h.clock().Now())),
              ElementsAre("PollMarksLater"));
  // Its own failed mark: this node handles its own failure already.
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false, 1, 3), true, h.clock().Now())),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false, 0, 3), false, h.clock().Now())), ElementsAre());
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false, 0, 3), true, h.clock().Now())),
              ElementsAre("Log(error): the workers of node rank 0 ended with exit status 3 (done "
                          "marks in the round's store; the rendezvous service is unreachable); "
                          "stopping this node's workers",
                          "StopWorkers(SIGTERM)"));
  EXPECT_EQ(h.lc().state(), NodeState::kStopping);
  // With a group restart left the service decides (when it comes back).
  NodeLifecycle::Options restartable = BaseOptions();
  restartable.max_restarts = 1;
  Harness left(restartable);
  left.Start(Round(0, 0, 1, 2));
  EXPECT_THAT(left.Do(left.lc().OnMarks(Marks(false, 0, 3), true, left.clock().Now())),
              ElementsAre());
}

TEST(NodeLifecycleTest, LingerUntilEveryMarkOrTheDeadline) {
  Harness h;
  AwaitOutcome(h, 0);
  const absl::Time deadline = h.clock().Now() + absl::Seconds(60);
  h.lc().OnLingerStarted(0, "done", /*wait_for_seen=*/false, deadline);
  EXPECT_TRUE(h.lc().lingering());
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(false), true, h.clock().Now())),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, h.clock().Now())),
              ElementsAre("Finish(0, done)"));
  EXPECT_THAT(h.Do(h.lc().OnMarks(Marks(true), true, h.clock().Now())), ElementsAre());
  // Waiting for the other nodes to have seen the outcome (FinishFromMarks on node rank 0), at
  // most until the deadline.
  Harness seen;
  AwaitOutcome(seen, 0);
  seen.lc().OnLingerStarted(3, "failed", /*wait_for_seen=*/true,
                            seen.clock().Now() + absl::Seconds(60));
  EXPECT_THAT(seen.Do(seen.lc().OnMarks(Marks(true, 1, 3), true, seen.clock().Now())),
              ElementsAre("PollMarksLater"));
  EXPECT_THAT(seen.Do(seen.lc().OnMarks(Marks(true, 1, 3, true), true, seen.clock().Now())),
              ElementsAre("Finish(3, failed)"));
  Harness late;
  AwaitOutcome(late, 0);
  late.lc().OnLingerStarted(69, "lost", /*wait_for_seen=*/true,
                            late.clock().Now() + absl::Seconds(60));
  late.clock().Advance(absl::Seconds(59));
  EXPECT_THAT(late.Do(late.lc().OnMarks(std::nullopt, true, late.clock().Now())),
              ElementsAre("PollMarksLater"));
  late.clock().Advance(absl::Seconds(1));
  EXPECT_THAT(late.Do(late.lc().OnMarks(std::nullopt, true, late.clock().Now())),
              ElementsAre("Finish(69, lost)"));
}

}  // namespace
}  // namespace dgt::agent
