// RoundStateMachine on a simulated clock: no sleeps, exact messages.
#include "rendezvous/round_state.h"

#include <time.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dgt::rendezvous {
namespace {

using RunState = RoundStateMachine::RunState;
const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

JoinRequest Join(const std::string& node_id, int min_nodes, int max_nodes, int nproc = 2,
                 const std::string& run_id = "job", int max_restarts = 0) {
  JoinRequest j;
  j.run_id = run_id;
  j.node_id = node_id;
  j.min_nodes = min_nodes;
  j.max_nodes = max_nodes;
  j.nproc_per_node = nproc;
  j.address = "10.0.0." + node_id.substr(node_id.size() - 1);
  j.store_port = 29500;
  j.last_call_timeout = absl::Seconds(30);
  j.join_timeout = absl::Seconds(600);
  j.max_restarts = max_restarts;
  return j;
}

// Collects what each session received, as a fake agent would.
class Harness {
 public:
  explicit Harness(RoundStateOptions options = {}) : m(std::move(options)) {}

  void Apply(const std::vector<Outgoing>& out) {
    for (const Outgoing& o : out) {
      all.push_back(o);
      if (std::holds_alternative<Assignment>(o.message))
        last_assignment[o.session] = std::get<Assignment>(o.message);
    }
  }
  std::vector<Outgoing> Join(SessionId s, const JoinRequest& j, absl::Time t = kT0) {
    auto out = m.OnJoin(s, j, t);
    Apply(out);
    return out;
  }
  std::vector<Outgoing> Close(SessionId s, absl::Time t = kT0) {
    auto out = m.OnSessionClosed(s, t);
    Apply(out);
    return out;
  }
  std::vector<Outgoing> Tick(absl::Time t) {
    auto out = m.OnTick(t);
    Apply(out);
    return out;
  }
  std::vector<Outgoing> Report(SessionId s, bool ok, int64_t round, absl::Time t = kT0,
                               double failed_at = 100.0, int code = 3) {
    NodeReport r;
    r.round = round;
    r.succeeded = ok;
    if (!ok) {
      r.message = absl::StrCat("rank 3 (local rank 1) exited with code ", code);
      r.failure.emplace();
      r.failure->rank = 3;
      r.failure->exit_code = code;
      r.failure->time = absl::UnixEpoch() + absl::Seconds(failed_at);
    }
    auto out = m.OnReport(s, r, t);
    Apply(out);
    return out;
  }
  std::vector<Outgoing> StoreReady(SessionId s, int port) {
    auto out = m.OnStoreReady(s, ::dgt::rendezvous::StoreReady{port}, kT0);
    Apply(out);
    return out;
  }
  int Rank(SessionId s) { return last_assignment.at(s).node_rank; }

  RoundStateMachine m;
  std::vector<Outgoing> all;
  std::map<SessionId, Assignment> last_assignment;
};

template <typename Kind>
int Count(const std::vector<Outgoing>& out) {
  int n = 0;
  for (const Outgoing& o : out) n += std::holds_alternative<Kind>(o.message) ? 1 : 0;
  return n;
}

template <typename Kind>
const Outgoing* For(const std::vector<Outgoing>& out, SessionId s) {
  for (const Outgoing& o : out) {
    if (o.session == s && std::holds_alternative<Kind>(o.message)) return &o;
  }
  return nullptr;
}

TEST(TypesTest, SameRoundComparesEveryFieldButReasonAndHost) {
  Assignment held;
  held.run_id = "job";
  held.round = 3;
  held.node_rank = 1;
  held.node_count = 2;
  held.world_size = 4;
  held.first_global_rank = 2;
  held.master_addr = "10.0.0.1";
  held.master_port = 29500;
  held.restart_count = 1;
  held.reason = "initial";
  held.host_node_id = "n1";
  Assignment rejoined = held;
  rejoined.reason = "rejoined";
  rejoined.host_node_id = "";
  EXPECT_TRUE(SameRound(rejoined, held));
  const std::vector<void (*)(Assignment&)> changes = {
      [](Assignment& a) { a.run_id = "other"; },  [](Assignment& a) { ++a.round; },
      [](Assignment& a) { ++a.node_rank; },       [](Assignment& a) { ++a.node_count; },
      [](Assignment& a) { ++a.world_size; },      [](Assignment& a) { ++a.first_global_rank; },
      [](Assignment& a) { a.master_addr = "x"; }, [](Assignment& a) { ++a.master_port; },
      [](Assignment& a) { ++a.restart_count; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    Assignment changed = held;
    changes[i](changed);
    EXPECT_FALSE(SameRound(changed, held)) << "change " << i;
  }
  EXPECT_STREQ(RunStateName(RunState::kGathering), "gathering");
  EXPECT_STREQ(RunStateName(RunState::kRunning), "running");
  EXPECT_STREQ(RunStateName(RunState::kClosed), "closed");
}

TEST(RoundStateTest, ClosesAtMaxWithSortedNodeRanks) {
  Harness h;
  auto first = h.Join(1, Join("node-b", 2, 2));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(std::get<JoinProgress>(first[0].message).joined_nodes, 1);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
  auto out = h.Join(2, Join("node-a", 2, 2));
  ASSERT_EQ(Count<Assignment>(out), 2);
  const Assignment& a = h.last_assignment[2];  // node-a sorts first: node rank 0.
  const Assignment& b = h.last_assignment[1];
  EXPECT_EQ(a.node_rank, 0);
  EXPECT_EQ(b.node_rank, 1);
  EXPECT_EQ(a.node_count, 2);
  EXPECT_EQ(a.world_size, 4);
  EXPECT_EQ(a.first_global_rank, 0);
  EXPECT_EQ(b.first_global_rank, 2);
  EXPECT_EQ(a.master_addr, "10.0.0.a");
  EXPECT_EQ(b.master_addr, "10.0.0.a");
  EXPECT_EQ(b.master_port, 29500);
  EXPECT_EQ(a.round, 0);
  EXPECT_EQ(a.restart_count, 0);
  EXPECT_EQ(a.reason, "initial");
  EXPECT_EQ(a.host_node_id, "");  // dgt-rendezvous: no agent hosts the service.
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
}

TEST(RoundStateTest, AssignmentsNameTheHostingAgent) {
  RoundStateOptions options;
  options.host_node_id = "node-a";
  Harness h(options);
  h.Join(1, Join("node-b", 2, 2));
  h.Join(2, Join("node-a", 2, 2));
  EXPECT_EQ(h.last_assignment[1].host_node_id, "node-a");
  EXPECT_EQ(h.last_assignment[2].host_node_id, "node-a");
}

TEST(RoundStateTest, ClosesAtMinAfterLastCall) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3), kT0 + absl::Seconds(1));
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(31));
  EXPECT_TRUE(h.Tick(kT0 + absl::Seconds(30)).empty());
  auto out = h.Tick(kT0 + absl::Seconds(31));
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.last_assignment[1].world_size, 4);
  EXPECT_EQ(h.Rank(2), 1);
}

TEST(RoundStateTest, LeavingBelowMinCancelsLastCall) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3));
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(30));
  // No broadcast on leave (a round of N nodes must not cost N^2 messages).
  EXPECT_TRUE(h.Close(2, kT0 + absl::Seconds(5)).empty());
  EXPECT_EQ(h.m.NextDeadline(), std::nullopt);
  EXPECT_TRUE(h.Tick(kT0 + absl::Seconds(60)).empty());
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
}

TEST(RoundStateTest, LastNodeLeavingForgetsTheRun) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Close(1);
  EXPECT_EQ(h.m.StateOf("job"), std::nullopt);
  EXPECT_EQ(h.m.run_count(), 0u);
}

TEST(RoundStateTest, RefusesConflictingAndDuplicateJoins) {
  Harness h;
  h.Join(1, Join("n1", 2, 2, 2));
  auto conflict = h.Join(2, Join("n2", 2, 2, 4));
  ASSERT_EQ(conflict.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(conflict[0].message).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::get<Refusal>(conflict[0].message).status.message(),
            "run 'job' uses --nnodes=2 --nproc-per-node=2; this node asked for --nnodes=2 "
            "--nproc-per-node=4");
  EXPECT_TRUE(conflict[0].close);
  JoinRequest dup = Join("n1", 2, 2, 2);
  dup.address = "10.9.9.9";
  auto d = h.Join(3, dup);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(d[0].message).status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(std::get<Refusal>(d[0].message).status.message(),
            "node id 'n1' is already in run 'job' from 10.0.0.1 (its agent is connected); a "
            "second agent with the same --node-id is refused");
  auto bad = h.Join(4, Join("n4", 3, 2));
  EXPECT_EQ(std::get<Refusal>(bad[0].message).status.message(),
            "--nnodes must be MIN:MAX with 0 < MIN <= MAX, got 3:2");
  JoinRequest long_id = Join("n5", 2, 2, 2);
  long_id.node_id = std::string(300, 'x');
  EXPECT_EQ(std::get<Refusal>(h.Join(5, long_id)[0].message).status.message(),
            "run_id, node_id and address must be at most 256 bytes, got 300");
  // The first node is untouched by all of this.
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
  auto ok = h.Join(6, Join("n2", 2, 2, 2));
  EXPECT_EQ(Count<Assignment>(ok), 2);
}

TEST(RoundStateTest, RunsAreIsolatedById) {
  Harness h;
  h.Join(1, Join("n1", 1, 1, 1, "a"));
  h.Join(2, Join("n1", 1, 1, 3, "b"));
  EXPECT_EQ(h.last_assignment[1].world_size, 1);
  EXPECT_EQ(h.last_assignment[2].world_size, 3);
  EXPECT_EQ(h.last_assignment[2].run_id, "b");
}

TEST(RoundStateTest, AllSuccessClosesRunAndRefusesLateJoins) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  EXPECT_TRUE(h.Report(1, true, 0).empty());
  auto out = h.Report(2, true, 0);
  ASSERT_EQ(Count<RunFinished>(out), 2);
  EXPECT_TRUE(std::get<RunFinished>(out[0].message).succeeded);
  EXPECT_EQ(std::get<RunFinished>(out[0].message).message, "all 2 nodes succeeded");
  EXPECT_TRUE(out[0].close);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kClosed);
  auto late = h.Join(3, Join("n3", 2, 2));
  EXPECT_EQ(std::get<Refusal>(late[0].message).status.code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::get<Refusal>(late[0].message).status.message(),
            "run 'job' is closed (succeeded: all 2 nodes succeeded); use a new run id");
  h.Tick(kT0 + absl::Hours(2));
  EXPECT_EQ(h.m.StateOf("job"), std::nullopt);
}

TEST(RoundStateTest, FailureWithoutRestartsEndsRunForEveryNode) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  // The run waits up to the failure grace for the other member's report...
  EXPECT_TRUE(h.Report(2, false, 0).empty());
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(1));
  auto out = h.Tick(kT0 + absl::Seconds(1));
  ASSERT_EQ(Count<RunFinished>(out), 2);
  const RunFinished& f = std::get<RunFinished>(out[0].message);
  EXPECT_FALSE(f.succeeded);
  EXPECT_EQ(f.message, "node n2 (node rank 1): rank 3 (local rank 1) exited with code 3");
  EXPECT_EQ(f.failure->rank, 3);
  EXPECT_EQ(f.failure->exit_code, 3);
  EXPECT_EQ(f.failure->node_id, "n2");
}

TEST(RoundStateTest, RootCauseIsTheEarliestFailureNotTheFirstReport) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  // n1's worker aborted because n2's worker had exited (code 4) a moment earlier.
  EXPECT_TRUE(h.Report(1, false, 0, kT0, /*failed_at=*/100.5, /*code=*/134).empty());
  auto out = h.Report(2, false, 0, kT0, /*failed_at=*/100.0, /*code=*/4);
  ASSERT_EQ(Count<RunFinished>(out), 2);
  const RunFinished& f = std::get<RunFinished>(out[0].message);
  EXPECT_EQ(f.failure->exit_code, 4);
  EXPECT_EQ(f.failure->node_id, "n2");
  EXPECT_EQ(f.message, "node n2 (node rank 1): rank 3 (local rank 1) exited with code 4");
}

TEST(RoundStateTest, FailureWithRestartsStartsNewRoundCountingRestart) {
  Harness h;
  h.Join(1, Join("n1", 2, 2, 2, "job", /*max_restarts=*/1));
  h.Join(2, Join("n2", 2, 2, 2, "job", 1));
  // Node rank 0's store served round 0: the restart round waits for its next store.
  EXPECT_TRUE(h.Report(2, false, 0).empty());
  auto out = h.StoreReady(1, 30001);
  ASSERT_EQ(Count<Assignment>(out), 2);
  const Assignment& a = h.last_assignment[1];
  EXPECT_EQ(a.round, 1);
  EXPECT_EQ(a.restart_count, 1);
  EXPECT_EQ(a.node_rank, 0);
  EXPECT_EQ(a.master_port, 30001);
  EXPECT_EQ(a.reason,
            "restart after failure: node n2 (node rank 1): rank 3 (local rank 1) exited with "
            "code 3");
  // A late report about round 0 is ignored; a failure in round 1 ends the run.
  EXPECT_TRUE(h.Report(1, false, 0).empty());
  EXPECT_TRUE(h.Report(1, false, 1).empty());
  auto end = h.Tick(kT0 + absl::Seconds(1));
  ASSERT_EQ(Count<RunFinished>(end), 2);
  EXPECT_EQ(std::get<RunFinished>(end[0].message).message,
            "node n1 (node rank 0): rank 3 (local rank 1) exited with code 3 (after 1 "
            "restart(s))");
}

TEST(RoundStateTest, LostNodeStartsRoundWithSurvivorsKeepingRankZero) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3));
  h.Join(3, Join("n3", 2, 3));
  EXPECT_EQ(h.Rank(1), 0);
  EXPECT_EQ(h.Rank(2), 1);
  EXPECT_EQ(h.Rank(3), 2);
  h.StoreReady(1, 30001);
  auto out = h.Close(2, kT0 + absl::Seconds(3));
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.Rank(1), 0);  // Survives and keeps rank 0.
  EXPECT_EQ(h.Rank(3), 1);  // The highest rank moved into the gap.
  const Assignment& a = h.last_assignment[3];
  EXPECT_EQ(a.round, 1);
  EXPECT_EQ(a.restart_count, 0);  // Membership changes are not restarts.
  EXPECT_EQ(a.world_size, 4);
  EXPECT_EQ(a.first_global_rank, 2);
  EXPECT_EQ(a.master_port, 30001);
  EXPECT_EQ(a.reason, "node lost: node n2 (10.0.0.2) was lost");
}

TEST(RoundStateTest, LosingRankZeroMovesTheStoreToTheNewRankZero) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3));
  h.Join(3, Join("n3", 2, 3));
  auto out = h.Close(1);
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.Rank(3), 0);
  EXPECT_EQ(h.Rank(2), 1);
  EXPECT_EQ(h.last_assignment[2].master_addr, "10.0.0.3");
}

TEST(RoundStateTest, LossBelowMinStopsWorkersThenFailsAfterJoinTimeout) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  auto out = h.Close(2, kT0);
  const Outgoing* stop = For<StopWorkers>(out, 1);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(std::get<StopWorkers>(stop->message).reason,
            "node n2 (10.0.0.2) was lost; waiting up to 10m for at least 2 nodes");
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(600));
  auto end = h.Tick(kT0 + absl::Seconds(600));
  ASSERT_EQ(Count<RunFinished>(end), 1);
  EXPECT_EQ(std::get<RunFinished>(end[0].message).message,
            "run 'job' had only 1 of at least 2 nodes for 10m after losing nodes");
  // A join timeout for the agents (exit 75), not a failure of the job's code.
  EXPECT_TRUE(std::get<RunFinished>(end[0].message).too_few_nodes);
}

TEST(RoundStateTest, LossBelowMinRecoversWhenANodeRejoins) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  h.Close(2, kT0);
  auto out = h.Join(4, Join("n2", 2, 2), kT0 + absl::Seconds(5));
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.Rank(1), 0);
  EXPECT_EQ(h.Rank(4), 1);
  EXPECT_EQ(h.last_assignment[4].round, 1);
  EXPECT_EQ(h.last_assignment[4].reason, "nodes rejoined");
}

TEST(RoundStateTest, LateNodeReachingMaxCausesScaleUpAtOnce) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3));
  h.Tick(kT0 + absl::Seconds(30));  // Round 0 with 2 nodes.
  EXPECT_EQ(h.last_assignment[1].node_count, 2);
  h.StoreReady(1, 30001);
  // With 3 = MAX nodes the scale-up round closes at once.
  auto out = h.Join(3, Join("n3", 2, 3), kT0 + absl::Seconds(40));
  ASSERT_EQ(Count<Assignment>(out), 3);
  EXPECT_EQ(h.last_assignment.at(3).node_rank, 2);
  EXPECT_EQ(h.last_assignment.at(3).reason, "scale-up");
  EXPECT_EQ(h.last_assignment.at(1).round, 1);
  EXPECT_EQ(h.last_assignment.at(1).restart_count, 0);
  EXPECT_EQ(h.last_assignment.at(1).world_size, 6);
}

TEST(RoundStateTest, ScaleUpBelowMaxWaitsForLastCall) {
  Harness h;
  h.Join(1, Join("n1", 1, 3));
  h.Tick(kT0 + absl::Seconds(30));
  h.StoreReady(1, 30001);
  h.Join(2, Join("n2", 1, 3), kT0 + absl::Seconds(31));
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(61));
  auto out = h.Tick(kT0 + absl::Seconds(61));
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.Rank(2), 1);
}

TEST(RoundStateTest, NodesBeyondMaxWaitForASlot) {
  Harness h;
  h.Join(1, Join("n1", 1, 2));
  h.Join(2, Join("n2", 1, 2));
  h.StoreReady(1, 30001);
  auto waiting = h.Join(3, Join("n3", 1, 2));
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JoinProgress>(waiting[0].message));
  EXPECT_EQ(h.m.NextDeadline(), std::nullopt);
  // A member is lost: the waiting node takes its place.
  auto out = h.Close(2);
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(h.Rank(1), 0);
  EXPECT_EQ(h.Rank(3), 1);
}

TEST(RoundStateTest, RunHoldsAtMostMaxPlusWaitingNodes) {
  RoundStateOptions options;
  options.max_waiting_nodes_per_run = 2;
  Harness h(options);
  h.Join(1, Join("n1", 1, 1));
  EXPECT_EQ(h.Rank(1), 0);
  for (SessionId s : {2, 3}) {
    auto out = h.Join(s, Join(absl::StrCat("n", s), 1, 1));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(
        std::holds_alternative<JoinProgress>(out[0].message));  // A spare: waits for a place.
  }
  auto refused = h.Join(4, Join("n4", 1, 1));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].session, 4u);
  EXPECT_TRUE(refused[0].close);
  EXPECT_EQ(std::get<Refusal>(refused[0].message).status.code(),
            absl::StatusCode::kResourceExhausted);  // RESOURCE_EXHAUSTED
  EXPECT_EQ(std::get<Refusal>(refused[0].message).status.message(),
            "run 'job' already holds 3 nodes (MAX 1 and 2 waiting); try again when a node leaves");
  EXPECT_EQ(h.m.counters().refused_joins, 1u);
  // The same node id is not a new node (not RESOURCE_EXHAUSTED): it is refused as a second
  // agent of a connected node (ALREADY_EXISTS); and other runs are not affected.
  auto again = h.Join(5, Join("n3", 1, 1));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].session, 5u);
  EXPECT_EQ(std::get<Refusal>(again[0].message).status.code(), absl::StatusCode::kAlreadyExists);
  h.Join(6, Join("o1", 1, 1, 2, "other"));
  EXPECT_EQ(h.Rank(6), 0);
  // A spare leaving makes room.
  h.Close(2);
  auto room = h.Join(7, Join("n7", 1, 1));
  ASSERT_EQ(room.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JoinProgress>(room[0].message));
}

TEST(RoundStateTest, HugeWaitingAllowanceDoesNotWrapAround) {
  // MAX + waiting is computed in 64 bits: INT32_MAX waiting must admit joins, not refuse all.
  RoundStateOptions options;
  options.max_waiting_nodes_per_run = std::numeric_limits<int32_t>::max();
  Harness h(options);
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  EXPECT_EQ(h.Rank(1), 0);
  EXPECT_EQ(h.Rank(2), 1);
  auto spare = h.Join(3, Join("n3", 2, 2));
  ASSERT_EQ(spare.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JoinProgress>(spare[0].message));
  EXPECT_EQ(h.m.counters().refused_joins, 0u);
}

TEST(RoundStateTest, RefusalSaysOneNodeInTheSingular) {
  RoundStateOptions options;
  options.max_waiting_nodes_per_run = 0;
  Harness h(options);
  h.Join(1, Join("n1", 1, 1));
  auto refused = h.Join(2, Join("n2", 1, 1));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(refused[0].message).status.message(),
            "run 'job' already holds 1 node (MAX 1 and 0 waiting); try again when a node leaves");
}

TEST(RoundStateTest, CountsStayExactThroughJoinsLossesAndReports) {
  // joined_nodes in JoinProgress is the run's connected count, kept incrementally.
  Harness h;
  for (SessionId s = 1; s <= 3; ++s) {
    auto out = h.Join(s, Join(absl::StrCat("n", s), 4, 4));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(std::get<JoinProgress>(out[0].message).joined_nodes, static_cast<int32_t>(s));
  }
  h.Close(2);
  auto out = h.Join(4, Join("n4", 4, 4));
  EXPECT_EQ(std::get<JoinProgress>(out[0].message).joined_nodes, 3);
  h.Join(5, Join("n5", 4, 4));  // Four: the round closes.
  ASSERT_EQ(h.last_assignment.size(), 4u);
  for (SessionId s : {1, 3, 4}) EXPECT_TRUE(h.Report(s, true, 0).empty());
  auto finished = h.Report(5, true, 0);
  ASSERT_EQ(finished.size(), 4u);
  EXPECT_EQ(std::get<RunFinished>(finished[0].message).message, "all 4 nodes succeeded");
}

TEST(RoundStateTest, AHundredThousandNodesCostLinearWork) {
  // A guard against O(N) work per join or report (O(N^2) per round): 100,000 joins, the round,
  // and 100,000 success reports take well under a second here; a scan per event would take
  // minutes. The bound is loose for sanitizer builds, and it is this thread's CPU time, not
  // wall-clock time, so a loaded machine does not fail it (ASan on 2 busy cores: 71 s of wall
  // clock for a few seconds of CPU).
  constexpr int kNodes = 100000;
  RoundStateMachine m;
  const auto thread_cpu = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return absl::DurationFromTimespec(ts);
  };
  const absl::Duration start = thread_cpu();
  size_t assignments = 0;
  for (int i = 0; i < kNodes; ++i) {
    JoinRequest j = Join(absl::StrCat("node-", 1000000 + i), kNodes, kNodes, 1);
    for (const Outgoing& o : m.OnJoin(i + 1, j, kT0))
      assignments += std::holds_alternative<Assignment>(o.message);
  }
  EXPECT_EQ(assignments, static_cast<size_t>(kNodes));
  NodeReport done;
  done.round = 0;
  done.succeeded = true;
  size_t finished = 0;
  for (int i = 0; i < kNodes; ++i) {
    for (const Outgoing& o : m.OnReport(i + 1, done, kT0))
      finished += std::holds_alternative<RunFinished>(o.message);
  }
  EXPECT_EQ(finished, static_cast<size_t>(kNodes));
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
  EXPECT_LT(thread_cpu() - start, absl::Seconds(30));
}

TEST(RoundStateTest, LosingANodeAfterAnotherFinishedFailsTheRun) {
  // node-a's workers are done; node-b is lost: a new round would run node-a's finished workers
  // again, so the run fails instead (even though MIN nodes could go on).
  Harness h;
  h.Join(1, Join("node-a", 1, 2));
  h.Join(2, Join("node-b", 1, 2));
  ASSERT_EQ(h.m.StateOf("job"), RunState::kRunning);
  h.Report(1, true, 0);
  auto out = h.Close(2);
  ASSERT_EQ(Count<RunFinished>(out), 1);
  EXPECT_EQ(Count<Assignment>(out), 0);
  const RunFinished& f = std::get<RunFinished>(out[0].message);
  EXPECT_FALSE(f.succeeded);
  EXPECT_EQ(f.message,
            "node node-b (10.0.0.b) was lost after 1 node(s) had finished; finished workers are "
            "not run again");
  EXPECT_EQ(h.m.StateOf("job"), RunState::kClosed);
}

TEST(RoundStateTest, SecondAgentWithSameNodeIdIsRefusedWhileTheFirstIsConnected) {
  // Replacing the connected agent's session would leave its workers running the same ranks as
  // the newcomer's. The newcomer is refused; the first agent is not disturbed.
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  auto out = h.Join(7, Join("n2", 2, 2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, 7u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.message(),
            "node id 'n2' is already in run 'job' from 10.0.0.2 (its agent is connected); a "
            "second agent with the same --node-id is refused");
  EXPECT_TRUE(out[0].close);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  EXPECT_EQ(h.m.Status("job", kT0)[0].round, 0);
  // Once the first agent is gone (its stream ended), a restarted agent with that id gets in.
  auto lost = h.Close(2);
  EXPECT_EQ(Count<StopWorkers>(lost), 1);
  auto back = h.Join(8, Join("n2", 2, 2));
  ASSERT_EQ(Count<Assignment>(back), 2);
  EXPECT_EQ(h.Rank(8), 1);
  EXPECT_EQ(h.last_assignment[8].round, 1);
  EXPECT_EQ(h.last_assignment[8].reason, "nodes rejoined");
}

TEST(RoundStateTest, WaitingNodeIsToldItWasNotAdmittedWhenTheRunFails) {
  Harness h;
  h.Join(1, Join("n1", 1, 1));
  auto waiting = h.Join(2, Join("n2", 1, 1));
  ASSERT_EQ(Count<JoinProgress>(waiting), 1);
  auto out = h.Report(1, false, 0);  // Every member failed: the run ends at once.
  ASSERT_EQ(out.size(), 2u);
  const Outgoing* done = For<RunFinished>(out, 1);
  ASSERT_NE(done, nullptr);
  EXPECT_FALSE(std::get<RunFinished>(done->message).succeeded);
  const Outgoing* refused = For<Refusal>(out, 2);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(std::get<Refusal>(refused->message).status.code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::get<Refusal>(refused->message).status.message(),
            "run 'job' ended (failed: node n1 (node rank 0): rank 3 (local rank 1) exited with "
            "code 3) before node 'n2' was admitted to it (it waited as a spare and was not "
            "needed)");
  EXPECT_TRUE(refused->close);
  EXPECT_EQ(For<RunFinished>(out, 2), nullptr);
}

TEST(RoundStateTest, WaitingNodeIsToldTheRunsSuccess) {
  Harness h;
  h.Join(1, Join("n1", 1, 1));
  h.Join(2, Join("n2", 1, 1));
  auto out = h.Report(1, true, 0);
  ASSERT_EQ(out.size(), 2u);
  for (SessionId s : {1, 2}) {
    const Outgoing* done = For<RunFinished>(out, s);
    ASSERT_NE(done, nullptr) << s;
    EXPECT_EQ(std::get<RunFinished>(done->message),
              (RunFinished{true, "all 1 nodes succeeded", std::nullopt}));
    EXPECT_TRUE(done->close);
  }
}

TEST(RoundStateTest, FinishedRunIdIsFreeOnceEveryAgentLeft) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.Report(1, true, 0);
  h.Report(2, true, 0);
  ASSERT_EQ(h.m.StateOf("job"), RunState::kClosed);
  h.Close(1);
  // n2's agent is still being told the outcome: a join now belongs to the finished run.
  auto late = h.Join(3, Join("n3", 2, 2));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(late[0].message).status.message(),
            "run 'job' is closed (succeeded: all 2 nodes succeeded); use a new run id");
  h.Close(2);
  // Every agent of the finished run left: the same id (torchrun's default "none", or a job's
  // fixed id) starts a new run at once, not an hour later.
  auto next = h.Join(4, Join("n1", 2, 2), kT0 + absl::Seconds(5));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(std::get<JoinProgress>(next[0].message).joined_nodes, 1);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
  auto second = h.Join(5, Join("n2", 2, 2), kT0 + absl::Seconds(5));
  ASSERT_EQ(Count<Assignment>(second), 2);
  EXPECT_EQ(h.last_assignment[4].round, 0);
  EXPECT_EQ(h.last_assignment[4].restart_count, 0);
}

// The assignment an agent holds for `node_id` in a 2-node round (2 workers per node).
JoinRequest Rejoin(const std::string& node_id, int node_rank, int64_t round = 3,
                   int restart_count = 1, int min_nodes = 2, int max_nodes = 2) {
  JoinRequest j = Join(node_id, min_nodes, max_nodes);
  j.store_port = 31000 + node_rank;  // The agent's current standby store.
  Assignment* a = &j.rejoin.emplace();
  a->run_id = "job";
  a->round = round;
  a->node_rank = node_rank;
  a->node_count = 2;
  a->world_size = 4;
  a->first_global_rank = 2 * node_rank;
  a->master_addr = "10.0.0.1";
  a->master_port = 29500;
  a->restart_count = restart_count;
  a->reason = "initial";
  return j;
}

TEST(RoundStateTest, RestartedServiceTakesTheRunBackFromRejoins) {
  Harness h;  // A service that never saw the run: it was restarted while the run ran.
  auto first = h.Join(5, Rejoin("n2", 1));
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<Assignment>(first[0].message));
  const Assignment& ack = std::get<Assignment>(first[0].message);
  EXPECT_EQ(ack.round, 3);
  EXPECT_EQ(ack.node_rank, 1);
  EXPECT_EQ(ack.restart_count, 1);
  EXPECT_EQ(ack.reason, "rejoined");
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  // n2's workers finished while n1 has not rejoined yet: not the run's success.
  EXPECT_TRUE(h.Report(5, true, 3).empty());
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  auto second = h.Join(6, Rejoin("n1", 0));
  EXPECT_EQ(std::get<Assignment>(For<Assignment>(second, 6)->message).node_rank, 0);
  EXPECT_EQ(Count<RunFinished>(second), 0);
  auto done = h.Report(6, true, 3);
  ASSERT_EQ(Count<RunFinished>(done), 2);
  EXPECT_TRUE(std::get<RunFinished>(done[0].message).succeeded);
  EXPECT_EQ(std::get<RunFinished>(done[0].message).message, "all 2 nodes succeeded");
  EXPECT_EQ(h.m.counters().rounds, 0u);  // No round was started over.
}

TEST(RoundStateTest, LastRejoinCompletesARunWhoseNodesAllReported) {
  Harness h;
  h.Join(5, Rejoin("n2", 1));
  h.Report(5, true, 3);
  h.Join(6, Rejoin("n1", 0));
  // n1 reported before: its report came on the old stream; the agent reports again after the
  // rejoin, and only then does the run end.
  auto out = h.Report(6, true, 3);
  EXPECT_EQ(Count<RunFinished>(out), 2);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kClosed);
}

TEST(RoundStateTest, RejoinReattachesToARunTheServiceStillHas) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  JoinRequest again = Join("n2", 2, 2);
  again.rejoin = h.last_assignment[2];
  auto out = h.Join(9, again);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, 9u);
  EXPECT_EQ(std::get<Assignment>(out[0].message).round, 0);
  EXPECT_EQ(std::get<Assignment>(out[0].message).reason, "rejoined");
  // The old stream's end, noticed later, is not a lost node.
  EXPECT_TRUE(h.Close(2).empty());
  EXPECT_TRUE(h.Report(1, true, 0).empty());
  auto done = h.Report(9, true, 0);
  ASSERT_EQ(Count<RunFinished>(done), 2);
  EXPECT_NE(For<RunFinished>(done, 9), nullptr);
}

TEST(RoundStateTest, RejoinToARunThatWentOnIsRefused) {
  Harness h;
  h.Join(1, Join("n1", 2, 3));
  h.Join(2, Join("n2", 2, 3));
  h.Join(3, Join("n3", 2, 3));
  h.StoreReady(1, 30001);
  Assignment old = h.last_assignment[3];
  h.Close(3);  // Lost: round 1 goes on with n1 and n2.
  ASSERT_EQ(h.last_assignment[1].round, 1);
  JoinRequest again = Join("n3", 2, 3);
  again.rejoin = old;
  auto out = h.Join(9, again);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.code(),
            absl::StatusCode::kAborted);  // ABORTED
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.message(),
            "node 'n3' rejoins run 'job' at round 0, but the run is running at round 1: it went "
            "on without this node");
}

TEST(RoundStateTest, InconsistentRejoinsAreRefused) {
  Harness h;
  h.Join(5, Rejoin("n1", 0));
  auto taken = h.Join(6, Rejoin("n9", 0));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(taken[0].message).status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(std::get<Refusal>(taken[0].message).status.message(),
            "node rank 0 of round 3 of run 'job' already rejoined from another node id");
  auto other_round = h.Join(7, Rejoin("n2", 1, /*round=*/2));
  EXPECT_EQ(std::get<Refusal>(other_round[0].message).status.message(),
            "node 'n2' rejoins run 'job' at round 2, but the run is running at round 3: it went "
            "on without this node");
  JoinRequest bad = Rejoin("n2", 1);
  bad.rejoin->node_rank = 2;
  EXPECT_EQ(std::get<Refusal>(h.Join(8, bad)[0].message).status.message(),
            "the rejoin of node 'n2' carries an invalid assignment (run 'job', round 3, node rank "
            "2 of 2)");
  EXPECT_TRUE(For<Assignment>(h.Join(9, Rejoin("n2", 1)), 9) != nullptr);
}

TEST(RoundStateTest, NodesThatDoNotRejoinInTimeAreLost) {
  RoundStateOptions options;
  options.rejoin_timeout = absl::Seconds(10);
  Harness h(options);
  h.Join(5, Rejoin("n1", 0), kT0);
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(10));
  auto out = h.Tick(kT0 + absl::Seconds(10));
  const Outgoing* stop = For<StopWorkers>(out, 5);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(std::get<StopWorkers>(stop->message).reason,
            "1 of 2 node(s) of round 3 did not rejoin within 10s after the rendezvous service "
            "restarted; waiting up to 10m for at least 2 nodes");
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
}

// The rejoin of a node (round 0, no restart yet) to a run that allows one restart.
JoinRequest RejoinRestartable(const std::string& node_id, int node_rank) {
  JoinRequest j = Rejoin(node_id, node_rank, /*round=*/0, /*restart_count=*/0);
  j.max_restarts = 1;
  return j;
}

TEST(RoundStateTest, RestartedServiceRestartsOnlyOnceEveryNodeRejoined) {
  Harness h;
  // node1 rejoins first, with the failure its workers had while the service was down.
  h.Join(5, RejoinRestartable("n2", 1));
  EXPECT_TRUE(h.Report(5, false, 0).empty());  // No restart round with node1 alone.
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  EXPECT_EQ(h.m.counters().rounds, 0u);
  auto out = h.Join(6, RejoinRestartable("n1", 0));
  EXPECT_EQ(Count<Refusal>(out), 0);
  ASSERT_EQ(Count<Assignment>(out), 3);  // The ack, then the restart round.
  EXPECT_EQ(h.m.counters().rounds, 1u);
  for (SessionId s : {5, 6}) {
    const Assignment& a = h.last_assignment.at(s);
    EXPECT_EQ(a.round, 1);
    EXPECT_EQ(a.restart_count, 1);
    EXPECT_EQ(a.node_count, 2);
    EXPECT_EQ(a.world_size, 4);
    EXPECT_EQ(a.reason,
              "restart after failure: node n2 (node rank 1): rank 3 (local rank 1) exited with "
              "code 3");
  }
  EXPECT_EQ(h.Rank(6), 0);
  EXPECT_EQ(h.Rank(5), 1);
}

TEST(RoundStateTest, RestartAskedForWhileRecoveringStartsWithTheRejoinedWhenTheWindowEnds) {
  RoundStateOptions options;
  options.rejoin_timeout = absl::Seconds(10);
  Harness h(options);
  JoinRequest j = RejoinRestartable("n2", 1);
  j.min_nodes = 1;
  h.Join(5, j);
  h.Report(5, false, 0);
  EXPECT_EQ(h.m.counters().rounds, 0u);
  auto out = h.Tick(kT0 + absl::Seconds(10));
  const Outgoing* a = For<Assignment>(out, 5);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(std::get<Assignment>(a->message).round, 1);
  EXPECT_EQ(std::get<Assignment>(a->message).restart_count, 1);
  EXPECT_EQ(std::get<Assignment>(a->message).world_size, 2);
  EXPECT_EQ(std::get<Assignment>(a->message).reason,
            "restart after failure: node n2 (node rank 1): rank 3 (local rank 1) exited with code "
            "3; 1 of 2 node(s) of round 0 did not rejoin within 10s after the rendezvous service "
            "restarted");
}

TEST(RoundStateTest, FailureWhileRecoveringDoesNotEndTheRunBeforeEveryNodeRejoined) {
  Harness h;  // failure_grace 1 s, rejoin window 60 s.
  h.Join(5, Rejoin("n2", 1));
  EXPECT_TRUE(h.Report(5, false, 3).empty());
  EXPECT_EQ(Count<RunFinished>(h.Tick(kT0 + absl::Seconds(5))), 0);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  h.Join(6, Rejoin("n1", 0), kT0 + absl::Seconds(6));
  auto out = h.Tick(kT0 + absl::Seconds(6));
  ASSERT_EQ(Count<RunFinished>(out), 2);
  EXPECT_EQ(std::get<RunFinished>(out[0].message).failure->exit_code, 3);
}

TEST(RoundStateTest, RejoinedNodeLostWhileRecoveringMayRejoinAgain) {
  Harness h;
  h.Join(5, Rejoin("n2", 1));
  h.Join(7, Join("n3", 2, 2));      // A fresh node waits.
  EXPECT_TRUE(h.Close(5).empty());  // Nothing decided while node rank 0 has not rejoined.
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
  EXPECT_NE(For<Assignment>(h.Join(8, Rejoin("n2", 1)), 8), nullptr);
  h.Join(6, Rejoin("n1", 0));
  h.Report(8, true, 3);
  // The members and n3, which waited while the round ran: a spare is told the success too.
  EXPECT_EQ(Count<RunFinished>(h.Report(6, true, 3)), 3);
}

TEST(RoundStateTest, MembersRejoinWinsOverAFreshAgentWithTheSameNodeId) {
  Harness h;
  // A replacement agent "n1" reaches the restarted service before the old n1 rejoins.
  h.Join(7, Join("n1", 2, 2));
  auto out = h.Join(5, Rejoin("n1", 0));
  const Outgoing* refused = For<Refusal>(out, 7);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(std::get<Refusal>(refused->message).status.code(),
            absl::StatusCode::kAlreadyExists);  // ALREADY_EXISTS
  EXPECT_EQ(std::get<Refusal>(refused->message).status.message(),
            "node id 'n1' is node rank 0 of round 3 of run 'job', whose agent rejoined; a second "
            "agent with the same --node-id is refused");
  EXPECT_TRUE(refused->close);
  const Outgoing* ack = For<Assignment>(out, 5);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(std::get<Assignment>(ack->message).node_rank, 0);
  EXPECT_TRUE(h.Close(7).empty());  // The refused stream's end changes nothing.
  h.Join(6, Rejoin("n2", 1));
  h.Report(5, true, 3);
  EXPECT_EQ(Count<RunFinished>(h.Report(6, true, 3)), 2);
}

TEST(RoundStateTest, RejoinOfAFinishedRunGetsItsOutcome) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.Report(1, true, 0);
  h.Report(2, true, 0);
  h.Close(1);
  h.Close(2);
  JoinRequest again = Join("n2", 2, 2);
  again.rejoin = h.last_assignment[2];
  auto out = h.Join(9, again);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::get<RunFinished>(out[0].message).succeeded);
  EXPECT_EQ(std::get<RunFinished>(out[0].message).message, "all 2 nodes succeeded");
  EXPECT_TRUE(out[0].close);
  // A rejoin never re-opens the closed run for a new one.
  EXPECT_EQ(h.m.StateOf("job"), RunState::kClosed);
}

TEST(RoundStateTest, StatusListsNodesByRank) {
  Harness h;
  h.Join(1, Join("n2", 2, 3), kT0);
  h.Join(2, Join("n1", 2, 3), kT0);
  h.Tick(kT0 + absl::Seconds(30));
  h.Join(3, Join("n3", 2, 3), kT0 + absl::Seconds(31));
  std::vector<RunStatus> s = h.m.Status("", kT0 + absl::Seconds(45));
  ASSERT_EQ(s.size(), 1u);
  const RunStatus& r = s[0];
  EXPECT_EQ(r.run_id, "job");
  EXPECT_EQ(r.state, RunState::kRunning);
  EXPECT_EQ(r.round, 0);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.master_addr, "10.0.0.1");
  ASSERT_EQ(r.nodes.size(), 3u);
  EXPECT_EQ(r.nodes[0].node_id, "n1");
  EXPECT_EQ(r.nodes[0].node_rank, 0);
  EXPECT_EQ(r.nodes[1].node_id, "n2");
  EXPECT_EQ(r.nodes[2].node_id, "n3");
  EXPECT_EQ(r.nodes[2].node_rank, -1);
  // Connected: in contact at the status call (keepalive), not only at the join.
  EXPECT_EQ(r.nodes[2].last_contact, absl::FromUnixSeconds(1'000'045));
  EXPECT_TRUE(h.m.Status("other", kT0).empty());
}

// LAST CONTACT follows a node for as long as its session is open (its connection answers the
// keepalive pings), and stays at the session's end once it is gone.
TEST(RoundStateTest, LastContactIsTheStatusTimeWhileConnectedThenTheSessionsEnd) {
  Harness h;
  h.Join(1, Join("n1", 2, 2), kT0);
  h.Join(2, Join("n2", 2, 2), kT0);
  h.StoreReady(1, 30001);
  auto contact = [&h](absl::Time at) {
    std::map<std::string, absl::Time> by_node;
    const std::vector<RunStatus> runs = h.m.Status("job", at);
    if (runs.size() != 1) return by_node;
    for (const NodeStatus& n : runs[0].nodes) by_node[n.node_id] = n.last_contact;
    return by_node;
  };
  const absl::Time t1 = kT0 + absl::Seconds(300);
  EXPECT_EQ(contact(t1), (std::map<std::string, absl::Time>{{"n1", t1}, {"n2", t1}}));
  h.Report(1, true, 0, kT0 + absl::Seconds(310));
  h.Close(1, kT0 + absl::Seconds(311));  // n1's part is done; its agent left.
  const absl::Time t2 = kT0 + absl::Seconds(400);
  EXPECT_EQ(contact(t2),
            (std::map<std::string, absl::Time>{{"n1", kT0 + absl::Seconds(311)}, {"n2", t2}}));
}

}  // namespace
}  // namespace dgt::rendezvous
