// The in-memory backend through the conformance suite, and the round state machine keeping its
// runs in a backend it is given.
#include "rendezvous/run_state_backend.h"

#include <memory>
#include <variant>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/round_state.h"
#include "tests/rendezvous/run_state_backend_suite.h"

namespace dgt::rendezvous {
namespace {

INSTANTIATE_TEST_SUITE_P(InMemory, RunStateBackendSuite,
                         ::testing::Values(BackendFactory{
                             "InMemory", [] { return std::make_unique<InMemoryRunStateBackend>(); },
                             /*leases_on_own_clock=*/false}),
                         [](const ::testing::TestParamInfo<BackendFactory>& info) {
                           return info.param.name;
                         });

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

JoinRequest Join(const std::string& node_id) {
  JoinRequest j;
  j.run_id = "job";
  j.node_id = node_id;
  j.min_nodes = 2;
  j.max_nodes = 2;
  j.nproc_per_node = 2;
  j.address = "10.0.0." + node_id.substr(1);
  j.store_port = 29500;
  return j;
}

// A round state machine keeping its runs in an in-memory backend, whose events are recorded.
class RoundStateBackendTest : public ::testing::Test {
 protected:
  static RoundStateOptions On(RunStateBackend* backend) {
    RoundStateOptions options;
    options.backend = backend;
    return options;
  }

  InMemoryRunStateBackend backend_;
  std::vector<RunEvent> events_;
  WatchId watch_ = backend_.Watch([this](const RunEvent& e) { events_.push_back(e); });
  RoundStateMachine m_{On(&backend_)};
};

TEST_F(RoundStateBackendTest, TheMachineKeepsItsRunsInTheBackendItIsGiven) {
  m_.OnJoin(1, Join("n1"), kT0);
  const RunRecord* run = backend_.Find("job");
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->state, RunState::kGathering);
  EXPECT_EQ(run->connected, 1);
  ASSERT_EQ(run->nodes.size(), 1u);
  EXPECT_EQ(run->nodes.at("n1").address, "10.0.0.1");
  EXPECT_EQ(run->nodes.at("n1").session, 1u);
  // One event, one commit.
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0], (RunEvent{RunEvent::Type::kPut, "job", 1}));
  EXPECT_EQ(backend_.RevisionOf("job"), 1);

  std::vector<Outgoing> out = m_.OnJoin(2, Join("n2"), kT0);
  ASSERT_EQ(out.size(), 2u);
  run = backend_.Find("job");
  EXPECT_EQ(run->state, RunState::kRunning);
  EXPECT_EQ(run->round, 0);
  EXPECT_EQ(run->members, 2);
  EXPECT_EQ(run->nodes.at("n1").node_rank, 0);
  EXPECT_EQ(run->nodes.at("n2").node_rank, 1);
  EXPECT_EQ(run->master_addr, "10.0.0.1");
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[1], (RunEvent{RunEvent::Type::kPut, "job", 2}));

  // A report is a write of the run too.
  m_.OnReport(2, NodeReport{0, true, std::nullopt, ""}, kT0);
  EXPECT_TRUE(backend_.Find("job")->nodes.at("n2").succeeded);
  EXPECT_EQ(backend_.RevisionOf("job"), 3);
}

TEST_F(RoundStateBackendTest, ARunForgottenByTheMachineIsDeletedFromTheBackend) {
  m_.OnJoin(1, Join("n1"), kT0);
  ASSERT_NE(backend_.Find("job"), nullptr);
  // Its only agent left before a round: nobody is left to tell, the run is forgotten.
  m_.OnSessionClosed(1, kT0);
  EXPECT_EQ(backend_.Find("job"), nullptr);
  EXPECT_EQ(m_.run_count(), 0u);
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[1].type, RunEvent::Type::kDelete);
  EXPECT_EQ(events_[1].run_id, "job");
}

TEST_F(RoundStateBackendTest, TicksWriteOnlyRunsWithADeadlinePassed) {
  JoinRequest a = Join("n1");
  a.run_id = "a";
  a.min_nodes = 1;  // Last call: closes at kT0 + 30 s.
  JoinRequest b = Join("n1");
  b.run_id = "b";  // Waits for a second node: no deadline.
  m_.OnJoin(1, a, kT0);
  m_.OnJoin(2, b, kT0);
  const Revision a_before = backend_.RevisionOf("a");
  const Revision b_before = backend_.RevisionOf("b");
  EXPECT_TRUE(m_.OnTick(kT0 + absl::Seconds(10)).empty());
  EXPECT_EQ(backend_.RevisionOf("a"), a_before);
  EXPECT_EQ(backend_.RevisionOf("b"), b_before);
  std::vector<Outgoing> out = m_.OnTick(kT0 + absl::Seconds(30));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<Assignment>(out[0].message));
  EXPECT_GT(backend_.RevisionOf("a"), a_before);
  EXPECT_EQ(backend_.RevisionOf("b"), b_before);
}

}  // namespace
}  // namespace dgt::rendezvous
