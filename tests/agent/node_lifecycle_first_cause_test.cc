// NodeLifecycle (agent/lifecycle/node_lifecycle.h): the exit status is the first cause's
// (docs/EXIT_CODES.md), whatever comes after it, and an outcome once known is not lost. Each test
// is a sequence tests/fuzz/lifecycle_fuzzer.cc found, named after what broke; every step's
// actions are asserted exactly.
#include <signal.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

using ::testing::ElementsAre;

class FakeClock final : public Clock {
 public:
  absl::Time Now() const override { return now; }
  absl::Time now = absl::FromUnixSeconds(1700000000);
};

constexpr char kLost[] =
    "lost the rendezvous service at 10.0.0.1:29400 and could not reach it again within 60 s "
    "(--rdzv-conf read_timeout)";

// One node of two workers (ranks 0 and 1), node rank 0 of a run of one node, group restarts with
// no restart left. Carries ApplyAssignment out as the Agent does (OnRoundApplied).
class Node {
 public:
  Node() {
    NodeLifecycle::Options o;
    o.run_id = "job";
    o.node_id = "n0";
    o.rdzv_endpoint = "10.0.0.1:29400";
    o.advertised_address = "10.0.0.2";
    o.nproc_per_node = 2;
    o.join_timeout_s = 600;
    o.reconnect_timeout_s = 60;
    lc_.emplace(o, &clock_);
  }

  NodeLifecycle& lc() { return *lc_; }
  absl::Time now() const { return clock_.now; }

  std::vector<std::string> Do(const LifecycleActions& actions) {
    std::vector<std::string> out;
    for (const LifecycleAction& a : actions) {
      out.push_back(DebugString(a));
      if (const auto* apply = std::get_if<actions::ApplyAssignment>(&a)) {
        std::vector<std::string> more = Do(lc_->OnRoundApplied(*apply->assignment));
        out.insert(out.end(), more.begin(), more.end());
      }
    }
    return out;
  }

  // Joins round 0; its two workers start.
  void Start() {
    lc_->OnJoinSent(now());
    RoundAssignment a;
    a.reason = "initial";
    ASSERT_THAT(Do(lc_->OnAssignment(a, 0, now())),
                ElementsAre("ApplyAssignment(round 0)", "StartRound(0)"));
    ASSERT_THAT(Do(lc_->OnSpawnDone(2, now())), ElementsAre());
    alive_ = 2;
  }

  // Worker `rank` exits with `code` (or by `signal`).
  std::vector<std::string> Exit(int rank, int code, int signal = 0) {
    WorkerExit e;
    e.rank = rank;
    e.local_rank = rank;
    e.pid = 100 + rank;
    e.exit_code = code;
    e.signal = signal;
    e.time = now();
    --alive_;
    return Do(lc_->OnWorkerExit(e, alive_, now()));
  }

  int alive() const { return alive_; }

 private:
  FakeClock clock_;
  std::optional<NodeLifecycle> lc_;
  int alive_ = 0;
};

RunOutcome FailedOn(std::string node_id, int exit_code) {
  RunOutcome o;
  o.message = "rank 2 on n1 exited with code 5";
  o.has_failure = true;
  o.failed_node_id = std::move(node_id);
  o.exit_code = exit_code;
  return o;
}

const char kRank1Failed[] =
    "rank 1 (local rank 1 on node rank 0, 10.0.0.2, pid 101) exited with code 3";
const char kRank1Log[] =
    "Log(error): rank 1 (local rank 1) exited with code 3; stopping the other workers and "
    "reporting to the rendezvous";
const char kSignalLog[] =
    "Log(warn): received SIGTERM; forwarding it to the workers and stopping (SIGKILL after 30 s)";

TEST(NodeLifecycleFirstCauseTest, SignalWhileStoppingForAWorkerFailureKeepsTheWorkersCode) {
  Node n;
  n.Start();
  EXPECT_THAT(n.Exit(1, 3),
              ElementsAre("RecordFailure(rank 1)", kRank1Log, "StopWorkers(SIGTERM)"));
  EXPECT_THAT(n.Do(n.lc().OnSignal(SIGTERM, true)),
              ElementsAre("InterruptCoordinator", kSignalLog, "StopWorkers(SIGTERM)"));
  EXPECT_THAT(n.Exit(0, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre(absl::StrCat("Finish(3, ", kRank1Failed, "; then stopped by SIGTERM)")));
}

TEST(NodeLifecycleFirstCauseTest, SignalAfterAFailureWasReportedKeepsTheWorkersCode) {
  Node n;
  n.Start();
  n.Exit(1, 3);
  EXPECT_THAT(n.Exit(0, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()), ElementsAre("Report(3, rank 1)"));
  EXPECT_THAT(n.Do(n.lc().OnSignal(SIGTERM, true)),
              ElementsAre(absl::StrCat("Finish(3, ", kRank1Failed, "; then stopped by SIGTERM)")));
}

TEST(NodeLifecycleFirstCauseTest, SignalAfterTheServiceEndedThisNodesPartKeeps77) {
  Node n;
  n.Start();
  const std::string ended =
      "the rendezvous service ended the part of node 'n0' in run 'job': removed";
  EXPECT_THAT(n.Do(n.lc().OnRefused("removed", /*rejoin=*/false, n.alive())),
              ElementsAre(absl::StrCat("Log(error): ", ended, "; stopping this node's workers"),
                          "StopWorkers(SIGTERM)"));
  n.Do(n.lc().OnSignal(SIGTERM, true));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre(absl::StrCat("Finish(77, ", ended, "; then stopped by SIGTERM)")));
}

TEST(NodeLifecycleFirstCauseTest, SignalAfterTheRunFailedElsewhereKeepsTheRootCausesCode) {
  Node n;
  n.Start();
  n.Do(n.lc().OnRunFinished(FailedOn("n1", 5)));
  n.Do(n.lc().OnSignal(SIGTERM, true));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre("Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, SignalWhileDrainingAKnownOutcomeKeepsItsCode) {
  Node n;
  n.Start();
  n.Do(n.lc().OnRunFinished(FailedOn("n1", 5)));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnSignal(SIGTERM, true)),
              ElementsAre("Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, ServiceLostAfterAWorkerFailedKeepsTheWorkersCode) {
  Node n;
  n.Start();
  n.Exit(1, 3);
  EXPECT_THAT(n.Do(n.lc().OnSessionClosed(SessionEnd{}, n.alive())), ElementsAre("Reconnect"));
  const std::string left = absl::StrCat(kRank1Failed, "; then ", kLost);
  EXPECT_THAT(n.Do(n.lc().OnReconnectWindowOver(false, std::nullopt, n.alive())),
              ElementsAre(absl::StrCat("Log(error): ", left, "; stopping this node's workers")));
  EXPECT_THAT(n.Exit(0, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre("MarkDone(3)", absl::StrCat("Linger(3, ", left, ")")));
}

TEST(NodeLifecycleFirstCauseTest, RefusalAfterAWorkerFailedKeepsTheWorkersCode) {
  Node n;
  n.Start();
  n.Exit(1, 3);
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Do(n.lc().OnDrained()), ElementsAre("Report(3, rank 1)"));
  EXPECT_THAT(
      n.Do(n.lc().OnRefused("removed", /*rejoin=*/false, 0)),
      ElementsAre(absl::StrCat("Linger(3, ", kRank1Failed,
                               "; then the rendezvous service ended the part of node 'n0' in run "
                               "'job': removed)")));
}

TEST(NodeLifecycleFirstCauseTest, RunFinishedWhileStoppingForAFailureIsNotLost) {
  Node n;
  n.Start();
  n.Exit(1, 3);
  // The service's root cause (first in time, on another node) comes while the workers stop.
  EXPECT_THAT(n.Do(n.lc().OnRunFinished(FailedOn("n1", 5))), ElementsAre());
  EXPECT_THAT(n.Exit(0, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  // No report that nobody answers: the outcome is there.
  EXPECT_THAT(
      n.Do(n.lc().OnDrained()),
      ElementsAre(absl::StrCat("Log(warn): this node's ", kRank1Failed,
                               " followed the root cause on another node"),
                  "ClearFailures", "Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, RunFailedWhileWaitingForARoundGivesTheRootCausesCode) {
  Node n;
  n.Start();
  n.Do(n.lc().OnStop("too few nodes", n.alive(), n.now()));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers"));
  ASSERT_EQ(n.lc().state(), NodeState::kWaitingForRound);
  EXPECT_THAT(n.Do(n.lc().OnRunFinished(FailedOn("n1", 5))),
              ElementsAre("Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, SessionEndAfterTheRunFailedIsNotALoss) {
  Node n;
  n.Start();
  n.Do(n.lc().OnRunFinished(FailedOn("n1", 5)));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  // The service ends the session after a RunFinished: no reconnect.
  EXPECT_THAT(n.Do(n.lc().OnSessionClosed(SessionEnd{}, 0)), ElementsAre());
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre("Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, RunFailedWhileANewRoundWaitsForTheWorkersEndsWithItsOutcome) {
  Node n;
  n.Start();
  RoundAssignment next;
  next.round = 1;
  next.reason = "node lost";
  n.Do(n.lc().OnAssignment(next, n.alive(), n.now()));
  ASSERT_EQ(n.lc().state(), NodeState::kRerounding);
  n.Do(n.lc().OnRunFinished(FailedOn("n1", 5)));
  n.Exit(0, 0, SIGTERM);
  // Not waiting for a round that will not come: the outcome once drained.
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnDrained()),
              ElementsAre("Finish(5, run failed: rank 2 on n1 exited with code 5)"));
}

TEST(NodeLifecycleFirstCauseTest, StopAfterANewRoundDropsThatRound) {
  Node n;
  n.Start();
  RoundAssignment next;
  next.round = 1;
  next.reason = "node lost";
  n.Do(n.lc().OnAssignment(next, n.alive(), n.now()));
  EXPECT_THAT(n.Do(n.lc().OnStop("too few nodes", n.alive(), n.now())),
              ElementsAre("Log(warn): the rendezvous stopped this node's workers: too few nodes",
                          "ClearFailures"));
  n.Exit(0, 0, SIGTERM);
  // The stopped round 1 does not start: a new round is awaited.
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers"));
  EXPECT_EQ(n.lc().state(), NodeState::kWaitingForRound);
}

TEST(NodeLifecycleFirstCauseTest, ReconnectWindowAfterASignalKeeps128PlusN) {
  Node n;
  n.Start();
  EXPECT_THAT(n.Do(n.lc().OnSessionClosed(SessionEnd{}, n.alive())), ElementsAre("Reconnect"));
  n.Do(n.lc().OnSignal(SIGTERM, true));
  n.Exit(0, 0, SIGTERM);
  EXPECT_THAT(n.Exit(1, 0, SIGTERM), ElementsAre("KillWorkers", "WatchDrain"));
  EXPECT_THAT(n.Do(n.lc().OnReconnectWindowOver(false, std::nullopt, 0)), ElementsAre());
  EXPECT_THAT(n.Do(n.lc().OnDrained()), ElementsAre("Finish(143, stopped by SIGTERM)"));
}

}  // namespace
}  // namespace dgt::agent
