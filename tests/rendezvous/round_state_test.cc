// RoundStateMachine on a simulated clock: no sleeps, exact messages.
#include "rendezvous/round_state.h"

#include "gtest/gtest.h"

namespace dgt::rendezvous {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

v1::JoinRequest Join(const std::string& node_id, int min_nodes, int max_nodes, int nproc = 2,
                     const std::string& run_id = "job") {
  v1::JoinRequest j;
  j.set_run_id(run_id);
  j.set_node_id(node_id);
  j.set_min_nodes(min_nodes);
  j.set_max_nodes(max_nodes);
  j.set_nproc_per_node(nproc);
  j.set_address("10.0.0." + node_id.substr(node_id.size() - 1));
  j.set_store_port(29500);
  j.set_last_call_timeout_s(30);
  return j;
}

std::vector<Outgoing> Of(const std::vector<Outgoing>& out, v1::ServiceMessage::KindCase kind) {
  std::vector<Outgoing> r;
  for (const Outgoing& o : out) {
    if (o.message.kind_case() == kind) r.push_back(o);
  }
  return r;
}

const v1::Assignment& AssignmentFor(const std::vector<Outgoing>& out, SessionId s) {
  for (const Outgoing& o : out) {
    if (o.session == s && o.message.has_assignment()) return o.message.assignment();
  }
  ADD_FAILURE() << "no assignment for session " << s;
  static v1::Assignment empty;
  return empty;
}

TEST(RoundStateTest, ClosesAtMaxWithSortedNodeRanks) {
  RoundStateMachine m;
  auto first = m.OnJoin(1, Join("node-b", 2, 2), kT0);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].message.progress().joined_nodes(), 1);
  EXPECT_EQ(m.StateOf("job"), RoundStateMachine::RunState::kOpen);
  auto out = m.OnJoin(2, Join("node-a", 2, 2, 2), kT0);
  ASSERT_EQ(Of(out, v1::ServiceMessage::kAssignment).size(), 2u);
  const v1::Assignment& a = AssignmentFor(out, 2);  // node-a sorts first: node rank 0.
  const v1::Assignment& b = AssignmentFor(out, 1);
  EXPECT_EQ(a.node_rank(), 0);
  EXPECT_EQ(b.node_rank(), 1);
  EXPECT_EQ(a.node_count(), 2);
  EXPECT_EQ(a.world_size(), 4);
  EXPECT_EQ(a.first_global_rank(), 0);
  EXPECT_EQ(b.first_global_rank(), 2);
  EXPECT_EQ(a.master_addr(), "10.0.0.a");
  EXPECT_EQ(b.master_addr(), "10.0.0.a");
  EXPECT_EQ(b.master_port(), 29500);
  EXPECT_EQ(a.round(), 0);
  EXPECT_EQ(m.StateOf("job"), RoundStateMachine::RunState::kActive);
}

TEST(RoundStateTest, ClosesAtMinAfterLastCall) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 3), kT0);
  m.OnJoin(2, Join("n2", 2, 3), kT0 + absl::Seconds(1));
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(31));
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(30)).empty());
  auto out = m.OnTick(kT0 + absl::Seconds(31));
  ASSERT_EQ(Of(out, v1::ServiceMessage::kAssignment).size(), 2u);
  EXPECT_EQ(AssignmentFor(out, 1).world_size(), 4);
  EXPECT_EQ(AssignmentFor(out, 2).node_rank(), 1);
}

TEST(RoundStateTest, LeavingBelowMinCancelsLastCall) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 3), kT0);
  m.OnJoin(2, Join("n2", 2, 3), kT0);
  auto out = m.OnSessionClosed(2, kT0 + absl::Seconds(5));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].message.progress().joined_nodes(), 1);
  EXPECT_EQ(m.NextDeadline(), std::nullopt);
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(60)).empty());
  EXPECT_EQ(m.StateOf("job"), RoundStateMachine::RunState::kOpen);
}

TEST(RoundStateTest, LastNodeLeavingForgetsTheRun) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 2), kT0);
  m.OnSessionClosed(1, kT0);
  EXPECT_EQ(m.StateOf("job"), std::nullopt);
}

TEST(RoundStateTest, RefusesConflictingAndDuplicateJoins) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 2, 2), kT0);
  auto conflict = m.OnJoin(2, Join("n2", 2, 2, 4), kT0);
  ASSERT_EQ(conflict.size(), 1u);
  EXPECT_EQ(conflict[0].message.error().code(), 3);
  EXPECT_EQ(conflict[0].message.error().message(),
            "run 'job' uses --nnodes=2 --nproc-per-node=2; this node asked for --nnodes=2 "
            "--nproc-per-node=4");
  EXPECT_TRUE(conflict[0].close);
  auto dup = m.OnJoin(3, Join("n1", 2, 2, 2), kT0);
  ASSERT_EQ(dup.size(), 1u);
  EXPECT_EQ(dup[0].message.error().code(), 6);
  EXPECT_EQ(dup[0].message.error().message(), "node id 'n1' already joined run 'job'");
  auto bad = m.OnJoin(4, Join("n4", 3, 2), kT0);
  EXPECT_EQ(bad[0].message.error().message(),
            "--nnodes must be MIN:MAX with 0 < MIN <= MAX, got 3:2");
}

TEST(RoundStateTest, RunsAreIsolatedById) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 1, 1, 1, "a"), kT0);
  auto out = m.OnJoin(2, Join("n1", 1, 1, 3, "b"), kT0);
  EXPECT_EQ(AssignmentFor(out, 2).world_size(), 3);
  EXPECT_EQ(AssignmentFor(out, 2).run_id(), "b");
}

TEST(RoundStateTest, AllSuccessClosesRunAndRefusesLateJoins) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 2), kT0);
  m.OnJoin(2, Join("n2", 2, 2), kT0);
  v1::NodeReport ok;
  ok.set_succeeded(true);
  EXPECT_TRUE(m.OnReport(1, ok, kT0).empty());
  auto out = m.OnReport(2, ok, kT0);
  auto finished = Of(out, v1::ServiceMessage::kFinished);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_TRUE(finished[0].message.finished().succeeded());
  EXPECT_EQ(finished[0].message.finished().message(), "all 2 nodes succeeded");
  EXPECT_TRUE(finished[0].close);
  EXPECT_EQ(m.StateOf("job"), RoundStateMachine::RunState::kClosed);
  auto late = m.OnJoin(3, Join("n3", 2, 2), kT0);
  EXPECT_EQ(late[0].message.error().code(), 9);
  EXPECT_EQ(late[0].message.error().message(), "run 'job' is closed; use a new run id");
  // Forgotten after the retention period.
  m.OnTick(kT0 + absl::Hours(2));
  EXPECT_EQ(m.StateOf("job"), std::nullopt);
}

TEST(RoundStateTest, FirstFailureEndsRunForEveryNode) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 2), kT0);
  m.OnJoin(2, Join("n2", 2, 2), kT0);
  v1::NodeReport fail;
  fail.set_succeeded(false);
  fail.set_message("rank 3 (local rank 1) exited with code 3");
  fail.mutable_failure()->set_rank(3);
  fail.mutable_failure()->set_exit_code(3);
  auto out = m.OnReport(2, fail, kT0);
  auto finished = Of(out, v1::ServiceMessage::kFinished);
  ASSERT_EQ(finished.size(), 2u);
  const v1::RunFinished& f = finished[0].message.finished();
  EXPECT_FALSE(f.succeeded());
  EXPECT_EQ(f.message(), "node n2 (node rank 1): rank 3 (local rank 1) exited with code 3");
  EXPECT_EQ(f.failure().rank(), 3);
  EXPECT_EQ(f.failure().exit_code(), 3);
  EXPECT_EQ(f.failure().node_id(), "n2");
}

TEST(RoundStateTest, LostNodeFailsActiveRun) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 2), kT0);
  m.OnJoin(2, Join("n2", 2, 2), kT0);
  auto out = m.OnSessionClosed(1, kT0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, 2u);
  EXPECT_EQ(out[0].message.finished().message(),
            "node n1 (node rank 0, 10.0.0.1) was lost before its workers finished");
}

}  // namespace
}  // namespace dgt::rendezvous
