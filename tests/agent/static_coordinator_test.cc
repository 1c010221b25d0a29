// StaticCoordinator against a real store server on loopback: what node rank 0 reports when the
// other nodes never joined, joined but never finished, all finished, or one did not succeed;
// Interrupt(); and another node losing node rank 0's store.
#include "agent/coord/static_coordinator.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio.hpp"
#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

class StaticCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(store_.Start().ok()); }

  StaticCoordinator::Options NodeOptions(int rank, int count) {
    StaticCoordinator::Options o;
    o.run_id = "job";
    o.node_rank = rank;
    o.node_count = count;
    o.master_addr = "127.0.0.1";
    o.master_port = store_.port();
    o.connect_timeout = absl::Seconds(5);
    o.finish_timeout = absl::Milliseconds(300);
    o.heartbeat_period = absl::Milliseconds(50);
    o.peer_lost_after = absl::Milliseconds(500);
    return o;
  }

  // Runs the io_context until `done` is set, at most 10 s.
  void RunUntil(const std::optional<absl::Status>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
    io_.restart();
  }

  // Starts `c` and waits until it is connected; failure callbacks go to `failures`, the message
  // of a stop by a signal (the callback's flag) with " [stopped by a signal]" after it.
  void Connect(StaticCoordinator& c, std::vector<std::pair<int, std::string>>* failures = nullptr) {
    std::optional<absl::Status> connected;
    c.Start([&](absl::Status s) { connected = s; },
            [failures](int status, const std::string& message, bool stopped_by_signal) {
              if (failures == nullptr) return;
              failures->emplace_back(
                  status, stopped_by_signal ? message + " [stopped by a signal]" : message);
            });
    RunUntil(connected);
    ASSERT_TRUE(connected.has_value());
    ASSERT_TRUE(connected->ok()) << *connected;
  }

  store::Server store_{store::ServerOptions{}};
  asio::io_context io_;
};

TEST_F(StaticCoordinatorTest, NodeRankZeroAloneFailsNamingTheMissingNode) {
  StaticCoordinator node0(io_, NodeOptions(0, 2));
  Connect(node0);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(*outcome, absl::DeadlineExceededError(
                          "node rank 1 never joined within the finish timeout of 300ms "
                          "(--join-timeout)"));
}

TEST_F(StaticCoordinatorTest, TellsUnfinishedNodesFromNodesThatNeverJoined) {
  StaticCoordinator node0(io_, NodeOptions(0, 4));
  StaticCoordinator node2(io_, NodeOptions(2, 4));
  StaticCoordinator node3(io_, NodeOptions(3, 4));
  Connect(node0);
  Connect(node2);
  Connect(node3);
  std::optional<absl::Status> node3_done;
  node3.Report(0, "", [&](absl::Status s) { node3_done = s; });
  RunUntil(node3_done);
  ASSERT_TRUE(node3_done.has_value());
  EXPECT_TRUE(node3_done->ok());
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(*outcome, absl::DeadlineExceededError(
                          "node rank 1 never joined; node rank 2 joined but did not finish "
                          "within the finish timeout of 300ms (--join-timeout)"));
}

TEST_F(StaticCoordinatorTest, EveryNodeDoneIsOk) {
  StaticCoordinator node0(io_, NodeOptions(0, 2));
  StaticCoordinator node1(io_, NodeOptions(1, 2));
  Connect(node0);
  Connect(node1);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  std::optional<absl::Status> node1_done;
  node1.Report(0, "", [&](absl::Status s) { node1_done = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
}

TEST_F(StaticCoordinatorTest, InterruptEndsTheWaitAtOnce) {
  auto options = NodeOptions(0, 2);
  options.finish_timeout = absl::Seconds(600);
  StaticCoordinator node0(io_, options);
  Connect(node0);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  io_.run_for(std::chrono::milliseconds(50));
  io_.restart();
  EXPECT_FALSE(outcome.has_value());
  const absl::Time start = absl::Now();
  node0.Interrupt();
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(*outcome, absl::CancelledError("stopped waiting for the other nodes (signal)"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // A later report does not wait either.
  std::optional<absl::Status> again;
  node0.Report(1, "x", [&](absl::Status s) { again = s; });
  RunUntil(again);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->ok());
}

// A node that ends with a non-zero status after node rank 0's workers succeeded (e.g. SIGTERM'd
// late): node rank 0 must not report success. Its failure callback gets that node's status,
// naming it, before its Report completes.
TEST_F(StaticCoordinatorTest, NodeRankZeroReportsAnotherNodesFailureAfterItsOwnSuccess) {
  StaticCoordinator node0(io_, NodeOptions(0, 3));
  StaticCoordinator node1(io_, NodeOptions(1, 3));
  StaticCoordinator node2(io_, NodeOptions(2, 3));
  std::vector<std::pair<int, std::string>> failures;
  Connect(node0, &failures);
  Connect(node1);
  Connect(node2);
  std::optional<absl::Status> outcome;
  std::vector<std::pair<int, std::string>> failures_at_outcome;
  node0.Report(0, "", [&](absl::Status s) {
    outcome = s;
    failures_at_outcome = failures;
  });
  std::optional<absl::Status> node1_done;
  std::optional<absl::Status> node2_done;
  node1.Report(0, "", [&](absl::Status s) { node1_done = s; });
  node2.Report(143, "stopped by SIGTERM", [&](absl::Status s) { node2_done = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
  ASSERT_EQ(failures_at_outcome.size(), 1u);
  EXPECT_EQ(failures_at_outcome[0].first, 143);
  EXPECT_EQ(failures_at_outcome[0].second,
            "node rank 2 did not succeed (exit status 143); reported failure: stopped by SIGTERM");
}

// Node rank 0's store goes away under another node (node rank 0 killed): after a bounded
// reconnect attempt the failure callback gets kExitRendezvousUnavailable naming node rank 0 and
// its address.
TEST_F(StaticCoordinatorTest, AnotherNodeNoticesNodeRankZerosStoreGone) {
  store::Server host{store::ServerOptions{}};
  ASSERT_TRUE(host.Start().ok());
  auto options = NodeOptions(1, 2);
  options.master_port = host.port();
  options.reconnect_timeout = absl::Milliseconds(300);
  StaticCoordinator node1(io_, options);
  std::vector<std::pair<int, std::string>> failures;
  Connect(node1, &failures);
  const absl::Time stopped = absl::Now();
  host.Stop();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (failures.empty() && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(3));
  EXPECT_EQ(failures[0].first, 69);  // kExitRendezvousUnavailable.
  const std::string address = absl::StrCat("127.0.0.1:", options.master_port);
  EXPECT_EQ(failures[0].second,
            absl::StrCat("lost node rank 0 (store host ", address,
                         "): its store closed the connection (store ", address,
                         ": connection lost: End of file) "
                         "and could not be reached again within 300ms: cannot reach the store at ",
                         address, ": Connection refused"));
}

// A store that answers again on node rank 0's port but is not the run's (node rank 0 started
// afresh) does not count as reconnected.
TEST_F(StaticCoordinatorTest, AStoreWithoutTheRunsKeysIsNotNodeRankZerosStore) {
  auto host = std::make_unique<store::Server>(store::ServerOptions{});
  ASSERT_TRUE(host->Start().ok());
  auto options = NodeOptions(1, 2);
  options.master_port = host->port();
  options.reconnect_timeout = absl::Seconds(5);
  StaticCoordinator node1(io_, options);
  std::vector<std::pair<int, std::string>> failures;
  Connect(node1, &failures);
  host->Stop();
  store::ServerOptions again;
  again.port = static_cast<uint16_t>(options.master_port);
  host = std::make_unique<store::Server>(again);
  ASSERT_TRUE(host->Start().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (failures.empty() && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].first, 69);
  EXPECT_EQ(
      failures[0].second,
      absl::StrCat("lost node rank 0 (store host 127.0.0.1:", options.master_port,
                   "): its store closed the connection (store 127.0.0.1:", options.master_port,
                   ": connection lost: End of file); "
                   "the store reached again does not know run 'job' (node rank 0 started "
                   "again?)"));
}

// Another node's agent dies (kill -9) while node rank 0 waits for it: node rank 0 notices within
// peer_lost_after, not the finish timeout (600 s), fails with kExitRendezvousUnavailable naming
// the node rank, and publishes it so that the remaining nodes stop too.
TEST_F(StaticCoordinatorTest, NodeRankZeroNoticesALostPeerAgentPromptly) {
  auto options0 = NodeOptions(0, 3);
  options0.finish_timeout = absl::Seconds(600);
  StaticCoordinator node0(io_, options0);
  auto node1 = std::make_unique<StaticCoordinator>(io_, NodeOptions(1, 3));
  StaticCoordinator node2(io_, NodeOptions(2, 3));
  std::vector<std::pair<int, std::string>> failures0;
  std::vector<std::pair<int, std::string>> failures2;
  Connect(node0, &failures0);
  Connect(*node1);
  Connect(node2, &failures2);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  io_.run_for(std::chrono::milliseconds(100));  // node rank 0 saw node rank 1 beat.
  io_.restart();
  const absl::Time killed = absl::Now();
  node1.reset();  // Its connections close and its heartbeats stop, as with kill -9.
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
  EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
  const std::string lost =
      "lost node rank 1 (its agent stopped updating its liveness key in node rank 0's store for "
      "500ms: it was killed or cannot reach node rank 0)";
  ASSERT_EQ(failures0.size(), 1u);
  EXPECT_EQ(failures0[0], std::make_pair(69, lost));  // kExitRendezvousUnavailable.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (failures2.empty() && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
  io_.restart();
  ASSERT_EQ(failures2.size(), 1u);
  EXPECT_EQ(failures2[0], std::make_pair(69, lost));
}

// A peer that is alive keeps beating: node rank 0 waits for it well past peer_lost_after, and a
// peer that reported done and then exited is not lost either.
TEST_F(StaticCoordinatorTest, LivePeersAndPeersThatReportedAreNotLost) {
  auto options0 = NodeOptions(0, 3);
  options0.finish_timeout = absl::Seconds(600);
  StaticCoordinator node0(io_, options0);
  StaticCoordinator node1(io_, NodeOptions(1, 3));
  auto node2 = std::make_unique<StaticCoordinator>(io_, NodeOptions(2, 3));
  std::vector<std::pair<int, std::string>> failures;
  Connect(node0, &failures);
  Connect(node1);
  Connect(*node2);
  std::optional<absl::Status> node2_done;
  node2->Report(0, "", [&](absl::Status s) { node2_done = s; });
  RunUntil(node2_done);
  ASSERT_TRUE(node2_done.has_value());
  node2.reset();  // Done, then gone.
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  // Three times peer_lost_after: bounded, and only to show that nothing happens meanwhile.
  io_.run_for(std::chrono::milliseconds(1500));
  io_.restart();
  EXPECT_FALSE(outcome.has_value());
  EXPECT_TRUE(failures.empty()) << failures[0].second;
  std::optional<absl::Status> node1_done;
  node1.Report(0, "", [&](absl::Status s) { node1_done = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
  EXPECT_TRUE(failures.empty());
}

// A node's agent stopped by a signal: the other nodes fail with exit status 1 naming that node
// rank and the signal, not with 128 + the signal (a scheduler would think them preempted).
TEST_F(StaticCoordinatorTest, AStoppedNodeIsNamedAndItsSignalIsNotTheOthersStatus) {
  auto options0 = NodeOptions(0, 2);
  options0.finish_timeout = absl::Seconds(600);
  {
    StaticCoordinator node0(io_, options0);
    StaticCoordinator node1(io_, NodeOptions(1, 2));
    std::vector<std::pair<int, std::string>> failures1;
    Connect(node0);
    Connect(node1, &failures1);
    node0.Interrupt();
    std::optional<absl::Status> stopped;
    node0.ReportStopped("SIGTERM", [&](absl::Status s) { stopped = s; });
    RunUntil(stopped);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (failures1.empty() && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
    io_.restart();
    ASSERT_EQ(failures1.size(), 1u);
    EXPECT_EQ(failures1[0], std::make_pair(1, std::string("node rank 0 was stopped by SIGTERM "
                                                          "[stopped by a signal]")));
  }
  options0.run_id = "job2";
  auto options1 = NodeOptions(1, 2);
  options1.run_id = "job2";
  StaticCoordinator node0(io_, options0);
  StaticCoordinator node1(io_, options1);
  std::vector<std::pair<int, std::string>> failures0;
  Connect(node0, &failures0);
  Connect(node1);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  std::optional<absl::Status> node1_done;
  node1.ReportStopped("SIGTERM", [&](absl::Status s) { node1_done = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  ASSERT_EQ(failures0.size(), 1u);
  EXPECT_EQ(failures0[0],
            std::make_pair(1, std::string("node rank 1 did not succeed (exit status 1); reported "
                                          "failure: node rank 1 was stopped by SIGTERM [stopped "
                                          "by a signal]")));
}

// A node that leaves after its health check failed: the others were healthy, so they fail as for
// another node's failure without a worker code (exit status 1), naming that node rank and its
// check, not with its own 71. While node rank 0 runs, and while it waits for the others.
TEST_F(StaticCoordinatorTest, AnUnhealthyNodeIsNamedAndItsCodeIsNotTheOthers) {
  {
    StaticCoordinator node0(io_, NodeOptions(0, 2));
    StaticCoordinator node1(io_, NodeOptions(1, 2));
    std::vector<std::pair<int, std::string>> failures0;
    Connect(node0, &failures0);
    Connect(node1);
    std::optional<absl::Status> left;
    node1.ReportUnhealthy("health check 'gpu-count' failed: 7 GPUs, expected 8",
                          [&](absl::Status s) { left = s; });
    RunUntil(left);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (failures0.empty() && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
    io_.restart();
    ASSERT_EQ(failures0.size(), 1u);
    EXPECT_EQ(failures0[0],
              std::make_pair(1, std::string("node rank 1 left the run: health check 'gpu-count' "
                                            "failed: 7 GPUs, expected 8")));
  }
  auto options0 = NodeOptions(0, 2);
  options0.run_id = "job2";
  options0.finish_timeout = absl::Seconds(600);
  auto options1 = NodeOptions(1, 2);
  options1.run_id = "job2";
  StaticCoordinator node0(io_, options0);
  StaticCoordinator node1(io_, options1);
  std::vector<std::pair<int, std::string>> failures0;
  Connect(node0, &failures0);
  Connect(node1);
  std::optional<absl::Status> outcome;
  node0.Report(0, "", [&](absl::Status s) { outcome = s; });
  std::optional<absl::Status> node1_done;
  node1.ReportUnhealthy("health check 'shm' failed: full", [&](absl::Status s) { node1_done = s; });
  RunUntil(outcome);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
  ASSERT_EQ(failures0.size(), 1u);
  EXPECT_EQ(failures0[0],
            std::make_pair(1, std::string("node rank 1 did not succeed (exit status 1); reported "
                                          "failure: node rank 1 left the run: health check 'shm' "
                                          "failed: full")));
}

// A second agent given the same --node-rank (or one restarted while the run goes on) is refused:
// it would run the same ranks twice (both ran RANK 1 and node rank 0 reported success).
TEST_F(StaticCoordinatorTest, SecondAgentWithTheSameNodeRankIsRefused) {
  StaticCoordinator node0(io_, NodeOptions(0, 2));
  StaticCoordinator node1(io_, NodeOptions(1, 2));
  Connect(node0);
  Connect(node1);
  StaticCoordinator again(io_, NodeOptions(1, 2));
  std::optional<absl::Status> connected;
  again.Start([&](absl::Status s) { connected = s; }, [](int, const std::string&, bool) {});
  RunUntil(connected);
  ASSERT_TRUE(connected.has_value());
  EXPECT_EQ(connected->code(), absl::StatusCode::kAlreadyExists) << *connected;
  EXPECT_TRUE(absl::StartsWith(connected->message(),
                               "node rank 1 of run 'job' is already held by another agent ("))
      << connected->message();
  EXPECT_TRUE(absl::EndsWith(connected->message(),
                             "); two agents with one --node-rank would run the same ranks twice"))
      << connected->message();
}

}  // namespace
}  // namespace dgt::agent
