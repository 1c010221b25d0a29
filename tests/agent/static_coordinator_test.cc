// StaticCoordinator against a real store server on loopback: what node rank 0 reports when the
// other nodes never joined, joined but never finished, or all finished; and Interrupt().
#include "agent/static_coordinator.h"

#include <optional>

#include "absl/status/status.h"
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
    return o;
  }

  // Runs the io_context until `done` is set, at most 10 s.
  void RunUntil(const std::optional<absl::Status>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done && absl::Now() < deadline) io_.run_for(std::chrono::milliseconds(10));
    io_.restart();
  }

  // Starts `c` and waits until it is connected.
  void Connect(StaticCoordinator& c) {
    std::optional<absl::Status> connected;
    c.Start([&](absl::Status s) { connected = s; }, [](int, const std::string&) {});
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

}  // namespace
}  // namespace dgt::agent
