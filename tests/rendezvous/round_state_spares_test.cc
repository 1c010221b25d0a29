// RoundStateMachine's hot spares on a simulated clock: which waiting nodes are spares, which
// spare takes a lost member's node rank, and that exactly one does. Exact messages.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/round_state.h"

namespace dgt::rendezvous {
namespace {

using RunState = RoundStateMachine::RunState;
const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

JoinRequest Join(const std::string& node_id, int min_nodes, int max_nodes, int spare_nodes = 0,
                 int max_restarts = 0) {
  JoinRequest j;
  j.run_id = "job";
  j.node_id = node_id;
  j.min_nodes = min_nodes;
  j.max_nodes = max_nodes;
  j.nproc_per_node = 2;
  j.address = "10.0.0." + node_id.substr(node_id.size() - 1);
  j.store_port = 29500 + static_cast<int>(node_id.back() - '0');
  j.last_call_timeout = absl::Seconds(30);
  j.join_timeout = absl::Seconds(600);
  j.max_restarts = max_restarts;
  j.spare_nodes = spare_nodes;
  return j;
}

// Collects what each session received, as fake agents would.
class Harness {
 public:
  std::vector<Outgoing> Keep(std::vector<Outgoing> out) {
    for (const Outgoing& o : out) {
      if (const auto* a = std::get_if<Assignment>(&o.message)) last[o.session] = *a;
    }
    return out;
  }
  std::vector<Outgoing> Join(SessionId s, const JoinRequest& j, absl::Time t = kT0) {
    return Keep(m.OnJoin(s, j, t));
  }
  std::vector<Outgoing> Close(SessionId s, absl::Time t = kT0) {
    return Keep(m.OnSessionClosed(s, t));
  }
  std::vector<Outgoing> Tick(absl::Time t) { return Keep(m.OnTick(t)); }
  std::vector<Outgoing> StoreReady(SessionId s, int port) {
    return Keep(m.OnStoreReady(s, ::dgt::rendezvous::StoreReady{port}, kT0));
  }
  std::vector<Outgoing> Report(SessionId s, bool ok, int64_t round) {
    NodeReport r;
    r.round = round;
    r.succeeded = ok;
    if (!ok) r.message = "rank 1 (local rank 1) exited with code 3";
    return Keep(m.OnReport(s, r, kT0));
  }
  // The node ranks of the run by node id (-1: waiting), as dgt status shows them.
  std::map<std::string, int32_t> Ranks() const {
    std::map<std::string, int32_t> ranks;
    for (const RunStatus& run : m.Status("job", kT0)) {
      for (const NodeStatus& n : run.nodes) ranks[n.node_id] = n.node_rank;
    }
    return ranks;
  }

  RoundStateMachine m;
  std::map<SessionId, Assignment> last;
};

template <typename Kind>
std::vector<SessionId> To(const std::vector<Outgoing>& out) {
  std::vector<SessionId> sessions;
  for (const Outgoing& o : out) {
    if (std::holds_alternative<Kind>(o.message)) sessions.push_back(o.session);
  }
  return sessions;
}

// A run of --nnodes=3 (MIN == MAX) joined by n1..n3 and the spare n4; round 0 runs.
void StartFixedRunWithOneSpare(Harness& h) {
  for (int i = 1; i <= 3; ++i) h.Join(i, Join(absl::StrCat("n", i), 3, 3));
  ASSERT_EQ(h.last.at(3).node_rank, 2);
  auto spare = h.Join(4, Join("n4", 3, 3));
  ASSERT_EQ(To<JoinProgress>(spare), std::vector<SessionId>{4});
  h.StoreReady(1, 30001);
}

TEST(RoundStateSparesTest, SpareTakesTheLostNodeRankAndItsGlobalRanks) {
  Harness h;
  StartFixedRunWithOneSpare(h);
  auto out = h.Close(2, kT0 + absl::Seconds(5));
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 4, 3}));
  const Assignment& spare = h.last.at(4);
  EXPECT_EQ(spare.round, 1);
  EXPECT_EQ(spare.node_rank, 1);          // n2's node rank...
  EXPECT_EQ(spare.first_global_rank, 2);  // ...and its global ranks 2 and 3.
  EXPECT_EQ(spare.node_count, 3);
  EXPECT_EQ(spare.world_size, 6);
  EXPECT_EQ(spare.restart_count, 0);  // A membership change, not a restart.
  EXPECT_EQ(spare.master_addr, "10.0.0.1");
  EXPECT_EQ(spare.master_port, 30001);
  EXPECT_EQ(spare.reason, "node lost: node n2 (10.0.0.2) was lost");
  EXPECT_EQ(h.last.at(1).node_rank, 0);
  EXPECT_EQ(h.last.at(3).node_rank, 2);  // Not moved into the gap: the layout is unchanged.
  EXPECT_EQ(h.last.at(3).first_global_rank, 4);
  EXPECT_EQ(h.last.at(3).master_addr, "10.0.0.1");
}

TEST(RoundStateSparesTest, SpareTakesTheHighestNodeRankWhenThatNodeIsLost) {
  Harness h;
  StartFixedRunWithOneSpare(h);
  auto out = h.Close(3);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 2, 4}));
  EXPECT_EQ(h.last.at(4).node_rank, 2);
  EXPECT_EQ(h.last.at(4).first_global_rank, 4);
  EXPECT_EQ(h.last.at(4).world_size, 6);
}

TEST(RoundStateSparesTest, SpareTakingNodeRankZeroHostsTheNewRoundsStore) {
  Harness h;
  StartFixedRunWithOneSpare(h);
  auto out = h.Close(1);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{4, 2, 3}));
  EXPECT_EQ(h.last.at(4).node_rank, 0);
  EXPECT_EQ(h.last.at(4).first_global_rank, 0);
  // Node rank 0's store was lost with it: the spare's own store serves the round.
  EXPECT_EQ(h.last.at(2).master_addr, "10.0.0.4");
  EXPECT_EQ(h.last.at(2).master_port, 29504);
  EXPECT_EQ(h.last.at(2).node_rank, 1);
  EXPECT_EQ(h.last.at(3).node_rank, 2);
}

TEST(RoundStateSparesTest, TwoSparesRacingForOneLostNodeExactlyOneTakesIt) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  h.Join(3, Join("n3", 2, 2));
  h.Join(4, Join("n4", 2, 2));
  auto out = h.Close(2);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 3}));
  EXPECT_EQ(To<JoinProgress>(out), std::vector<SessionId>{4});  // Still a spare.
  EXPECT_EQ(h.last.at(3).node_rank, 1);
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n3", 1}, {"n4", -1}}));
  // The spare that took over dies before its workers ran: the other spare takes node rank 1.
  h.StoreReady(1, 30002);
  auto again = h.Close(3);
  EXPECT_EQ(To<Assignment>(again), (std::vector<SessionId>{1, 4}));
  EXPECT_EQ(h.last.at(4).node_rank, 1);
  EXPECT_EQ(h.last.at(4).round, 2);
  EXPECT_EQ(h.last.at(4).world_size, 4);
  EXPECT_EQ(h.last.at(4).reason, "node lost: node n3 (10.0.0.3) was lost");
}

TEST(RoundStateSparesTest, LossAndASparesJoinInOneBatchGiveTheNodeRankToOneSpare) {
  Harness h;
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  h.Join(4, Join("n4", 2, 2));
  // The loss and a second spare's join reach the service together (one group commit).
  h.m.BeginBatch();
  auto lost = h.Close(2);
  auto joined = h.Join(3, Join("n3", 2, 2));
  ASSERT_TRUE(h.m.EndBatch().ok());
  EXPECT_EQ(To<Assignment>(lost), (std::vector<SessionId>{1, 4}));
  EXPECT_TRUE(To<Assignment>(joined).empty());
  EXPECT_EQ(To<JoinProgress>(joined), std::vector<SessionId>{3});
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n3", -1}, {"n4", 1}}));
}

// A run of --nnodes=2 joined by n1, n2 and the spare n3; n2 is lost and n3 takes node rank 1 in
// round 1.
void SpareTakesNodeRankOneOfTwo(Harness& h) {
  h.Join(1, Join("n1", 2, 2));
  h.Join(2, Join("n2", 2, 2));
  h.StoreReady(1, 30001);
  h.Join(3, Join("n3", 2, 2));
  h.Close(2);
  ASSERT_EQ(h.last.at(3).round, 1);
  ASSERT_EQ(h.last.at(3).node_rank, 1);
}

TEST(RoundStateSparesTest, SpareDyingWhileTakingOverWithNoOtherSpareStopsTheSurvivors) {
  Harness h;
  SpareTakesNodeRankOneOfTwo(h);
  auto out = h.Close(3);
  EXPECT_EQ(To<StopWorkers>(out), std::vector<SessionId>{1});
  EXPECT_EQ(h.m.StateOf("job"), RunState::kGathering);
  // A new spare arriving in time takes the place.
  h.StoreReady(1, 30002);
  auto back = h.Join(5, Join("n5", 2, 2), kT0 + absl::Seconds(10));
  EXPECT_EQ(To<Assignment>(back), (std::vector<SessionId>{1, 5}));
  EXPECT_EQ(h.last.at(5).node_rank, 1);
  EXPECT_EQ(h.last.at(5).first_global_rank, 2);
}

// A spare frozen while it took over is lost; the run waits for nodes. Its agent comes back with
// the round it was given: the run went on without it, but it is the node the run waits for, so
// the rejoin counts as a fresh join (before, it was refused and the run failed for want of nodes).
TEST(RoundStateSparesTest, ASpareLostWhileTakingOverRejoinsTheRunThatWaitsForNodes) {
  Harness h;
  SpareTakesNodeRankOneOfTwo(h);
  const Assignment taken = h.last.at(3);
  ASSERT_EQ(To<StopWorkers>(h.Close(3)), std::vector<SessionId>{1});
  ASSERT_EQ(h.m.StateOf("job"), RunState::kGathering);
  h.StoreReady(1, 30002);
  JoinRequest rejoin = Join("n3", 2, 2);
  rejoin.rejoin = taken;
  auto back = h.Join(6, rejoin, kT0 + absl::Seconds(2));
  EXPECT_EQ(To<Refusal>(back), std::vector<SessionId>{});
  EXPECT_EQ(To<Assignment>(back), (std::vector<SessionId>{1, 6}));
  const Assignment& again = h.last.at(6);
  EXPECT_EQ(again.round, 2);
  EXPECT_EQ(again.node_rank, 1);
  EXPECT_EQ(again.first_global_rank, 2);
  EXPECT_EQ(again.master_port, 30002);
  EXPECT_EQ(h.last.at(1).round, 2);
  EXPECT_EQ(h.m.StateOf("job"), RunState::kRunning);
}

// A rejoin to a run that went on without the node and runs again is still refused: the node's
// workers would hold ranks that another node has now.
TEST(RoundStateSparesTest, ARejoinToARunThatWentOnAndRunsIsRefused) {
  Harness h;
  StartFixedRunWithOneSpare(h);
  const Assignment old = h.last.at(2);
  h.Close(2);  // n4 takes node rank 1 in round 1.
  ASSERT_EQ(h.last.at(4).round, 1);
  JoinRequest rejoin = Join("n2", 3, 3);
  rejoin.rejoin = old;
  auto out = h.Join(7, rejoin);
  ASSERT_EQ(To<Refusal>(out), std::vector<SessionId>{7});
  const auto& refusal = std::get<Refusal>(out[0].message);
  EXPECT_EQ(refusal.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(refusal.status.message(),
            "node 'n2' rejoins run 'job' at round 0, but the run is running at round 1: it went "
            "on without this node");
}

TEST(RoundStateSparesTest, SparesOnAnElasticRunDoNotGrowTheWorld) {
  Harness h;
  h.Join(1, Join("n1", 1, 3, /*spare_nodes=*/1));
  h.Tick(kT0 + absl::Seconds(30));  // Round 0 with one node.
  h.StoreReady(1, 30001);
  auto spare = h.Join(2, Join("n2", 1, 3, 1), kT0 + absl::Seconds(31));
  EXPECT_EQ(To<JoinProgress>(spare), std::vector<SessionId>{2});
  EXPECT_EQ(h.m.NextDeadline(), std::nullopt);  // One spare: no scale-up.
  // A second waiting node is beyond the spares: a scale-up after the last call, growing by one.
  h.Join(3, Join("n3", 1, 3, 1), kT0 + absl::Seconds(40));
  EXPECT_EQ(h.m.NextDeadline(), kT0 + absl::Seconds(70));
  auto up = h.Tick(kT0 + absl::Seconds(70));
  EXPECT_EQ(To<Assignment>(up), (std::vector<SessionId>{1, 2}));
  EXPECT_EQ(To<JoinProgress>(up), std::vector<SessionId>{3});
  EXPECT_EQ(h.last.at(2).node_count, 2);
  EXPECT_EQ(h.last.at(2).reason, "scale-up");
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n2", 1}, {"n3", -1}}));
  // The spare replaces a lost member one for one.
  h.StoreReady(1, 30002);
  h.Close(1);
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n2", 1}, {"n3", 0}}));
  EXPECT_EQ(h.last.at(3).world_size, 4);
  EXPECT_EQ(h.last.at(3).master_addr, "10.0.0.3");
}

TEST(RoundStateSparesTest, ReachingMaxBeyondTheSparesScalesUpAtOnce) {
  Harness h;
  h.Join(1, Join("n1", 1, 2, 1));
  h.Tick(kT0 + absl::Seconds(30));
  h.StoreReady(1, 30001);
  h.Join(2, Join("n2", 1, 2, 1));
  auto up = h.Join(3, Join("n3", 1, 2, 1));
  EXPECT_EQ(To<Assignment>(up), (std::vector<SessionId>{1, 2}));
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n2", 1}, {"n3", -1}}));
}

TEST(RoundStateSparesTest, RestartRoundKeepsTheSparesWaiting) {
  Harness h;
  h.Join(1, Join("n1", 1, 3, 1, /*max_restarts=*/1));
  h.Tick(kT0 + absl::Seconds(30));
  h.StoreReady(1, 30001);
  h.Join(2, Join("n2", 1, 3, 1, 1));
  auto restart = h.Report(1, false, 0);
  EXPECT_EQ(To<Assignment>(restart), std::vector<SessionId>{1});
  EXPECT_EQ(To<JoinProgress>(restart), std::vector<SessionId>{2});
  EXPECT_EQ(h.last.at(1).restart_count, 1);
  EXPECT_EQ(h.last.at(1).node_count, 1);
}

TEST(RoundStateSparesTest, LostNodesWithoutSparesCloseUpAsBefore) {
  Harness h;
  for (int i = 1; i <= 4; ++i) h.Join(i, Join(absl::StrCat("n", i), 2, 4));
  h.StoreReady(1, 30001);
  h.Close(2);
  // No spare: the highest node rank moves into the gap.
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n3", 2}, {"n4", 1}}));
}

// An unused spare of a run that succeeded is told the success (its agent exits 0: a Slurm step
// or an Indexed Job counts any other code as a failure); of a run that failed, that it was not
// admitted (77).
TEST(RoundStateSparesTest, UnusedSpareIsToldTheSuccessOrThatItWasNotNeeded) {
  Harness h;
  h.Join(1, Join("n1", 1, 1));
  h.Join(2, Join("n2", 1, 1));
  auto out = h.Report(1, true, 0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(To<RunFinished>(out), (std::vector<SessionId>{1, 2}));
  EXPECT_EQ(std::get<RunFinished>(out[1].message),
            (RunFinished{true, "all 1 nodes succeeded", std::nullopt}));
  EXPECT_TRUE(out[1].close);

  Harness failed;
  failed.Join(1, Join("n1", 1, 1));
  failed.Join(2, Join("n2", 1, 1));
  out = failed.Report(1, false, 0);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(To<Refusal>(out), std::vector<SessionId>{2});
  const auto& refusal = std::get<Refusal>(out[1].message);
  EXPECT_EQ(refusal.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refusal.status.message(),
            "run 'job' ended (failed: node n1 (node rank 0): rank 1 (local rank 1) exited with "
            "code 3) before node 'n2' was admitted to it (it waited as a spare and was not "
            "needed)");
  EXPECT_TRUE(out[1].close);
}

TEST(RoundStateSparesTest, NodeWaitingForAGatheringRunIsNotCalledASpare) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.Join(i, Join(absl::StrCat("n", i), 3, 3));
  h.Close(2);
  h.Close(3);  // Below MIN: the run gathers again, n1 waits for nodes.
  h.Join(4, Join("n4", 3, 3), kT0 + absl::Seconds(1));
  auto out = h.Tick(kT0 + absl::Seconds(600));
  // A join timeout for n4 as for n1 (both exit 75), not a spare's end.
  EXPECT_EQ(To<Refusal>(out), std::vector<SessionId>{});
  ASSERT_EQ(To<RunFinished>(out), (std::vector<SessionId>{1, 4}));
  EXPECT_EQ(
      std::get<RunFinished>(out[1].message),
      (RunFinished{false, "run 'job' had only 2 of at least 3 nodes for 10m after losing nodes",
                   std::nullopt, /*too_few_nodes=*/true}));
  EXPECT_TRUE(out[1].close);
}

TEST(RoundStateSparesTest, NegativeOrHugeSpareCountIsRefused) {
  Harness h;
  auto out = h.Join(1, Join("n1", 1, 1, -1));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status,
            absl::InvalidArgumentError("--spare-nodes must be 0..1000, got -1"));
  auto huge = h.Join(2, Join("n2", 1, 1, 1001));
  EXPECT_EQ(std::get<Refusal>(huge[0].message).status,
            absl::InvalidArgumentError("--spare-nodes must be 0..1000, got 1001"));
}

// A rejoin's layout must follow from its node count and the run's nproc: the next round's
// places (which a spare takes) are computed from it.
TEST(RoundStateSparesTest, RejoinWhoseWorldSizeDoesNotFollowFromItsNodesIsRefused) {
  Harness h;
  JoinRequest j = Join("n2", 3, 3);
  Assignment& a = j.rejoin.emplace();
  a.run_id = "job";
  a.round = 0;
  a.node_rank = 2;
  a.node_count = 3;
  a.world_size = 3;  // Three nodes of two workers make 6.
  a.first_global_rank = 4;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  auto out = h.Join(1, j);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status,
            absl::InvalidArgumentError("the rejoin of node 'n2' carries an invalid assignment "
                                       "(run 'job', round 0, node rank 2 of 3)"));
  a.world_size = 6;
  a.first_global_rank = 2;
  out = h.Join(2, j);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.code(), absl::StatusCode::kInvalidArgument);
  a.first_global_rank = 4;
  out = h.Join(3, j);
  ASSERT_EQ(To<Assignment>(out), std::vector<SessionId>{3});
  EXPECT_EQ(h.last.at(3).reason, "rejoined");
}

TEST(RoundStateSparesTest, TheRunsFirstJoinSetsTheSpareCountAndAnotherIsRefused) {
  Harness h;
  h.Join(1, Join("n1", 1, 3, 0));
  h.Tick(kT0 + absl::Seconds(30));
  h.StoreReady(1, 30001);
  // A later join asking for another count is refused, as a differing --nnodes is: the run's
  // count decides which waiting nodes are spares.
  auto out = h.Join(2, Join("n2", 1, 3, 1), kT0 + absl::Seconds(31));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status,
            absl::InvalidArgumentError(
                "run 'job' uses --spare-nodes=0; this node asked for --spare-nodes=1"));
  EXPECT_TRUE(out[0].close);
  EXPECT_EQ(h.m.NextDeadline(), std::nullopt);  // No scale-up: n2 is not in the run.
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}}));
  // The same count is let in.
  EXPECT_EQ(To<Refusal>(h.Join(3, Join("n3", 1, 3, 0), kT0 + absl::Seconds(32))),
            std::vector<SessionId>{});
}

// JoinProgress.spare of the one message to session `s` in `out`.
bool SpareFlag(const std::vector<Outgoing>& out, SessionId s) {
  for (const Outgoing& o : out) {
    if (const auto* p = std::get_if<JoinProgress>(&o.message); p != nullptr && o.session == s) {
      return p->spare;
    }
  }
  ADD_FAILURE() << "no JoinProgress to session " << s;
  return false;
}

TEST(RoundStateSparesTest, ANodeWaitingForAScaleUpIsNotCalledASpare) {
  Harness h;
  h.Join(1, Join("n1", 1, 3));
  h.Tick(kT0 + absl::Seconds(31));  // Round 0 with n1 after the last call.
  ASSERT_EQ(h.last.at(1).node_rank, 0);
  h.StoreReady(1, 30001);
  // No --spare-nodes: n2 grows the run after the last call, so it is no spare.
  EXPECT_FALSE(SpareFlag(h.Join(2, Join("n2", 1, 3)), 2));
}

TEST(RoundStateSparesTest, AnElasticRunsSpareWithinSpareNodesIsCalledASpare) {
  Harness h;
  h.Join(1, Join("n1", 1, 3, 1));
  h.Tick(kT0 + absl::Seconds(31));
  ASSERT_EQ(h.last.at(1).node_rank, 0);
  h.StoreReady(1, 30001);
  EXPECT_TRUE(SpareFlag(h.Join(2, Join("n2", 1, 3, 1)), 2));
}

// In-place spares (JoinRequest.in_place_spares: --restart-policy rank, replace mode).
JoinRequest InPlaceJoin(const std::string& node_id, int min_nodes, int max_nodes,
                        int max_restarts = 0) {
  JoinRequest j = Join(node_id, min_nodes, max_nodes, 0, max_restarts);
  j.in_place_spares = true;
  return j;
}

// A run of --nnodes=3 joined by n1..n3 and the spare n4, all asking for in-place spares; round 0
// runs on n1's store 29501, and n1's next store (30001) is ready.
void StartInPlaceRunWithOneSpare(Harness& h, int max_restarts = 0) {
  for (int i = 1; i <= 3; ++i) h.Join(i, InPlaceJoin(absl::StrCat("n", i), 3, 3, max_restarts));
  ASSERT_EQ(h.last.at(1).master_port, 29501);
  h.Join(4, InPlaceJoin("n4", 3, 3, max_restarts));
  h.StoreReady(1, 30001);
}

TEST(RoundStateSparesTest, InPlaceSpareRoundKeepsTheStoreTheLayoutAndTheRestartCount) {
  Harness h;
  StartInPlaceRunWithOneSpare(h);
  auto out = h.Close(2);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 4, 3}));
  const std::string reason =
      "node lost: node n2 (10.0.0.2) was lost (in place: the survivors keep their workers)";
  for (SessionId s : {1, 4, 3}) {
    const Assignment& a = h.last.at(s);
    EXPECT_TRUE(a.in_place) << s;
    EXPECT_EQ(a.round, 1) << s;
    EXPECT_EQ(a.node_count, 3) << s;
    EXPECT_EQ(a.world_size, 6) << s;
    EXPECT_EQ(a.restart_count, 0) << s;
    // Round 0's store: it holds the recovery keys the replacements join by.
    EXPECT_EQ(a.master_addr, "10.0.0.1") << s;
    EXPECT_EQ(a.master_port, 29501) << s;
    EXPECT_EQ(a.reason, reason) << s;
  }
  EXPECT_EQ(h.last.at(1).node_rank, 0);
  EXPECT_EQ(h.last.at(4).node_rank, 1);
  EXPECT_EQ(h.last.at(4).first_global_rank, 2);
  EXPECT_EQ(h.last.at(3).node_rank, 2);
  EXPECT_EQ(h.last.at(3).first_global_rank, 4);
  // n1's next store was not used: a later ordinary round still starts on an empty store.
  auto restart = h.Report(3, false, 1);
  EXPECT_EQ(To<Assignment>(restart), std::vector<SessionId>{});  // No restart left: it fails.
  const auto status = h.m.Status("job", kT0);
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].master_port, 29501);
  EXPECT_EQ(status[0].round, 1);
}

TEST(RoundStateSparesTest, InPlaceRunsNextOrdinaryRoundUsesNodeRankZerosNextStore) {
  Harness h;
  StartInPlaceRunWithOneSpare(h, /*max_restarts=*/1);
  h.Close(2);
  ASSERT_TRUE(h.last.at(4).in_place);
  // A failure with a restart left is a restart round: not in place, on n1's next store.
  auto out = h.Report(3, false, 1);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 4, 3}));
  EXPECT_FALSE(h.last.at(4).in_place);
  EXPECT_EQ(h.last.at(4).round, 2);
  EXPECT_EQ(h.last.at(4).restart_count, 1);
  EXPECT_EQ(h.last.at(4).master_port, 30001);
}

TEST(RoundStateSparesTest, InPlaceRunLosingNodeRankZeroGetsAnOrdinaryRound) {
  Harness h;
  StartInPlaceRunWithOneSpare(h);
  auto out = h.Close(1);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{4, 2, 3}));
  // The store with the recovery keys went with node rank 0: every node starts afresh.
  EXPECT_FALSE(h.last.at(2).in_place);
  EXPECT_EQ(h.last.at(2).master_addr, "10.0.0.4");
  EXPECT_EQ(h.last.at(2).master_port, 29504);
  EXPECT_EQ(h.last.at(2).reason, "node lost: node n1 (10.0.0.1) was lost");
}

TEST(RoundStateSparesTest, InPlaceRunWithoutASpareClosesUpInAnOrdinaryRound) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.Join(i, InPlaceJoin(absl::StrCat("n", i), 2, 3));
  ASSERT_EQ(h.last.at(3).node_rank, 2);
  h.StoreReady(1, 30001);
  auto out = h.Close(2);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 3}));
  EXPECT_FALSE(h.last.at(3).in_place);
  EXPECT_EQ(h.last.at(3).node_rank, 1);  // Moved into the gap: the world shrank.
  EXPECT_EQ(h.last.at(3).world_size, 4);
  EXPECT_EQ(h.last.at(3).master_port, 30001);
}

TEST(RoundStateSparesTest, InPlaceLossWhileARestartRoundIsHeldGivesOneOrdinaryRound) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.Join(i, InPlaceJoin(absl::StrCat("n", i), 3, 3, 1));
  h.Join(4, InPlaceJoin("n4", 3, 3, 1));
  // n1's next store is not ready: the restart round is held for it.
  EXPECT_EQ(To<Assignment>(h.Report(3, false, 0)), std::vector<SessionId>{});
  EXPECT_EQ(To<Assignment>(h.Close(2)), std::vector<SessionId>{});
  auto out = h.StoreReady(1, 30001);
  EXPECT_EQ(To<Assignment>(out), (std::vector<SessionId>{1, 4, 3}));
  EXPECT_FALSE(h.last.at(4).in_place);
  EXPECT_EQ(h.last.at(4).round, 1);
  EXPECT_EQ(h.last.at(4).restart_count, 1);  // The held restart, once.
  EXPECT_EQ(h.last.at(4).node_rank, 1);
  EXPECT_EQ(h.last.at(4).master_port, 30001);
}

TEST(RoundStateSparesTest, AJoinThatDiffersOnInPlaceSparesIsRefused) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.Join(i, InPlaceJoin(absl::StrCat("n", i), 2, 2));
  auto out = h.Join(3, Join("n3", 2, 2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status,
            absl::InvalidArgumentError(
                "run 'job' keeps its workers when a spare takes a lost node's place "
                "(--restart-policy=rank, replace mode); this node restarts its workers in every "
                "new round (--restart-policy=group, or --recovery-mode=shrink)"));
  EXPECT_TRUE(out[0].close);
  EXPECT_EQ(h.Ranks(), (std::map<std::string, int32_t>{{"n1", 0}, {"n2", 1}}));
}

}  // namespace
}  // namespace dgt::rendezvous
