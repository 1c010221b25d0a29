// RoundStateMachine as a replica that becomes the leader (AdoptRuns), as one whose commit fails
// (commit_failure), and with a round held for node rank 0's next store, on the in-memory backend
// and a simulated clock: exact messages.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rendezvous/round_state.h"
#include "rendezvous/run_state_backend.h"
#include "tests/testutil/forwarding_run_state_backend.h"

namespace dgt::rendezvous {
namespace {

using RunState = RoundStateMachine::RunState;
const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

JoinRequest Join(const std::string& node_id, int min_nodes, int max_nodes) {
  JoinRequest j;
  j.run_id = "job";
  j.node_id = node_id;
  j.min_nodes = min_nodes;
  j.max_nodes = max_nodes;
  j.nproc_per_node = 2;
  j.address = "10.0.0." + node_id.substr(node_id.size() - 1);
  j.store_port = 29500;
  j.last_call_timeout = absl::Seconds(30);
  j.join_timeout = absl::Seconds(600);
  return j;
}

// The in-memory backend whose commits fail while `fail` is set (a replica whose etcd write
// failed: unreachable, or fenced).
class FailingBackend final : public ForwardingRunStateBackend {
 public:
  absl::Status fail;
  absl::StatusOr<Revision> Commit(absl::string_view id) override {
    ++commits;
    if (!fail.ok()) return fail;
    return ForwardingRunStateBackend::Commit(id);
  }
  absl::Status Reload() override {
    ++reloads;
    return reload;
  }
  absl::Status reload;
  int commits = 0;
  int reloads = 0;
};

NodeReport Success(int64_t round) {
  NodeReport r;
  r.round = round;
  r.succeeded = true;
  return r;
}

template <typename Kind>
const Kind* Find(const std::vector<Outgoing>& out, SessionId s) {
  for (const Outgoing& o : out) {
    if (o.session == s && std::holds_alternative<Kind>(o.message))
      return &std::get<Kind>(o.message);
  }
  return nullptr;
}

// Two nodes ran round 0 of "job" on sessions 1 and 2; returns their assignments by node id.
std::map<std::string, Assignment> RunTwoNodes(RoundStateMachine& m, int min_nodes = 2) {
  std::map<std::string, Assignment> held;
  std::vector<Outgoing> all;
  for (auto& o : m.OnJoin(1, Join("n1", min_nodes, 2), kT0)) all.push_back(o);
  for (auto& o : m.OnJoin(2, Join("n2", min_nodes, 2), kT0)) all.push_back(o);
  for (auto& o : m.OnStoreReady(1, StoreReady{30001}, kT0)) all.push_back(o);
  for (const Outgoing& o : all) {
    if (const auto* a = std::get_if<Assignment>(&o.message)) {
      held[o.session == 1 ? "n1" : "n2"] = *a;
    }
  }
  return held;
}

JoinRequest RejoinWith(const std::string& node_id, const Assignment& a, int min_nodes = 2) {
  JoinRequest j = Join(node_id, min_nodes, 2);
  j.rejoin = a;
  return j;
}

TEST(AdoptRunsTest, RunningRunWaitsForItsMembersToRejoinWithTheirAssignments) {
  FailingBackend backend;
  RoundStateOptions options;
  options.backend = &backend;
  RoundStateMachine m(options);
  auto held = RunTwoNodes(m);
  ASSERT_EQ(held.size(), 2u);
  ASSERT_EQ(held["n1"].round, 0);
  const uint64_t rounds = m.counters().rounds;

  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(5)).ok());
  EXPECT_EQ(backend.reloads, 1);
  EXPECT_EQ(m.StateOf("job"), RunState::kRunning);
  // The old sessions are the old leader's: unknown here.
  auto stale = m.OnReport(1, Success(0), kT0 + absl::Seconds(6));
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(stale[0].message).status.message(), "report before join");
  // No member left in the stored run until they rejoin.
  EXPECT_TRUE(m.Status("job", kT0)[0].nodes.empty());

  auto first = m.OnJoin(11, RejoinWith("n2", held["n2"]), kT0 + absl::Seconds(7));
  ASSERT_EQ(first.size(), 1u);
  const Assignment* ack = Find<Assignment>(first, 11);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->node_rank, held["n2"].node_rank);
  EXPECT_EQ(ack->round, 0);
  EXPECT_EQ(ack->master_port, held["n2"].master_port);
  EXPECT_EQ(ack->world_size, 4);
  EXPECT_EQ(ack->reason, "rejoined");
  // n2's success before n1 is back is not the run's.
  EXPECT_TRUE(m.OnReport(11, Success(0), kT0 + absl::Seconds(8)).empty());
  auto second = m.OnJoin(12, RejoinWith("n1", held["n1"]), kT0 + absl::Seconds(9));
  ASSERT_NE(Find<Assignment>(second, 12), nullptr);
  EXPECT_EQ(Find<Assignment>(second, 12)->node_rank, 0);
  auto done = m.OnReport(12, Success(0), kT0 + absl::Seconds(10));
  ASSERT_NE(Find<RunFinished>(done, 11), nullptr);
  ASSERT_NE(Find<RunFinished>(done, 12), nullptr);
  EXPECT_EQ(Find<RunFinished>(done, 12)->message, "all 2 nodes succeeded");
  EXPECT_EQ(m.counters().rounds, rounds);  // No round started over.
}

TEST(AdoptRunsTest, MembersThatDoNotRejoinWithinTheWindowAreLost) {
  RoundStateOptions options;
  options.rejoin_timeout = absl::Seconds(20);
  RoundStateMachine m(options);
  auto held = RunTwoNodes(m, /*min_nodes=*/1);
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(5)).ok());
  ASSERT_EQ(m.NextDeadline(), kT0 + absl::Seconds(25));
  ASSERT_NE(
      Find<Assignment>(m.OnJoin(11, RejoinWith("n1", held["n1"], 1), kT0 + absl::Seconds(6)), 11),
      nullptr);
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(24)).empty());
  auto out = m.OnTick(kT0 + absl::Seconds(25));
  const Assignment* next = Find<Assignment>(out, 11);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->round, 1);
  EXPECT_EQ(next->node_count, 1);
  EXPECT_EQ(next->node_rank, 0);
  EXPECT_EQ(next->reason,
            "node lost: 1 of 2 node(s) of round 0 did not rejoin within 20s after the rendezvous "
            "service restarted");
}

TEST(AdoptRunsTest, GatheringRunKeepsItsNodesWhichReattachWithAPlainJoin) {
  RoundStateMachine m;
  ASSERT_TRUE(m.OnJoin(1, Join("n1", 2, 2), kT0).size() == 1);  // JoinProgress.
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(1)).ok());
  ASSERT_EQ(m.Status("job", kT0).size(), 1u);
  ASSERT_EQ(m.Status("job", kT0)[0].nodes.size(), 1u);
  EXPECT_EQ(m.Status("job", kT0)[0].nodes[0].node_id, "n1");
  // The same node id again (its agent reconnected to the new leader): not a second agent.
  auto again = m.OnJoin(7, Join("n1", 2, 2), kT0 + absl::Seconds(2));
  EXPECT_EQ(Find<Refusal>(again, 7), nullptr);
  auto out = m.OnJoin(8, Join("n2", 2, 2), kT0 + absl::Seconds(3));
  ASSERT_NE(Find<Assignment>(out, 7), nullptr);
  ASSERT_NE(Find<Assignment>(out, 8), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 7)->node_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 8)->node_rank, 1);
  EXPECT_EQ(Find<Assignment>(out, 8)->node_count, 2);
}

// A gathering run at MIN has a last-call deadline; adopted, its nodes have no session, so the
// deadline passes below MIN. The tick must drop it (a new one starts when MIN is back): a deadline
// left in the past made the service's timer tick, and write the run, without pause.
TEST(AdoptRunsTest, AdoptedGatheringRunBelowMinLeavesNoDeadlineInThePast) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 1, 2), kT0).size(), 1u);  // JoinProgress; last call at +30 s.
  ASSERT_EQ(m.NextDeadline(), kT0 + absl::Seconds(30));
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(1)).ok());
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(31)).empty());
  EXPECT_EQ(m.NextDeadline(), std::nullopt);
  EXPECT_EQ(m.StateOf("job"), RunState::kGathering);
  // The node re-attaches: MIN again, a new last call, then the round.
  auto again = m.OnJoin(7, Join("n1", 1, 2), kT0 + absl::Seconds(40));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(std::get<JoinProgress>(again[0].message), (JoinProgress{1, 1, 2}));
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(70));
  auto out = m.OnTick(kT0 + absl::Seconds(70));
  ASSERT_NE(Find<Assignment>(out, 7), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 7)->round, 0);
  EXPECT_EQ(Find<Assignment>(out, 7)->node_count, 1);
}

// A running run with a node waiting for a scale-up is adopted; its member does not rejoin, so
// the run goes back to gathering. The scale-up deadline must go with the round it was for: left
// set, it stayed in the past and the service's timer ticked without pause.
TEST(AdoptRunsTest, RunBackToGatheringAfterTheRejoinWindowKeepsNoScaleUpDeadline) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 1, 3), kT0).size(), 1u);
  auto first = m.OnTick(kT0 + absl::Seconds(30));
  ASSERT_NE(Find<Assignment>(first, 1), nullptr);
  ASSERT_EQ(m.OnJoin(2, Join("n2", 1, 3), kT0 + absl::Seconds(31)).size(), 1u);  // Progress.
  ASSERT_EQ(m.NextDeadline(), kT0 + absl::Seconds(61));                          // The scale-up.
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(32)).ok());
  // n1 never rejoins; n2 has not re-attached: too few nodes, the run waits for them.
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(92)).empty());
  EXPECT_EQ(m.StateOf("job"), RunState::kGathering);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(92 + 600));  // The join timeout only.
}

// A scale-up round held for node rank 0's next store, then the run adopted and its member lost:
// the held round goes with the members it was for. Kept, it stopped the gathering run's tick, so
// the join timeout never failed the run and stayed in the past (the timer ticked without pause).
TEST(AdoptRunsTest, RunBackToGatheringDropsARoundHeldForItsStoreAndTimesOut) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 1, 3), kT0).size(), 1u);
  ASSERT_NE(Find<Assignment>(m.OnTick(kT0 + absl::Seconds(30)), 1), nullptr);
  ASSERT_EQ(m.OnJoin(2, Join("n2", 1, 3), kT0 + absl::Seconds(31)).size(), 1u);
  // The scale-up is due, but n1 has not said its next store is ready: the round is held.
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(61)).empty());
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(62)).ok());
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(122)).empty());  // n1 did not rejoin.
  EXPECT_EQ(m.StateOf("job"), RunState::kGathering);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(122 + 600));
  // Nobody came back within the join timeout: the run fails (no session left to tell).
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(722)).empty());
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(722) + absl::Hours(1));
}

// A round held for node rank 0's next store was computed from the sessions of the replica that
// held it. Adopted, it was sent to whichever node re-attached first: a round of 1 node in a run
// of MIN 2, during the members' rejoin window.
TEST(AdoptRunsTest, ARoundHeldForItsStoreIsNotSentToTheFirstNodeThatReattaches) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 2, 2), kT0).size(), 1u);
  auto first = m.OnJoin(2, Join("n2", 2, 2), kT0);
  ASSERT_NE(Find<Assignment>(first, 1), nullptr);
  ASSERT_NE(Find<Assignment>(first, 2), nullptr);
  m.OnJoin(3, Join("n3", 2, 2), kT0 + absl::Seconds(1));  // Waits: the run is at MAX.
  // n2 is lost; n1 and n3 make MIN, but n1's next store is not ready: the round is held.
  for (const Outgoing& o : m.OnSessionClosed(2, kT0 + absl::Seconds(2))) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message));
  }
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(3)).ok());
  auto out = m.OnJoin(9, Join("n3", 2, 2), kT0 + absl::Seconds(4));
  for (const Outgoing& o : out) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message)) << "to session " << o.session;
  }
  EXPECT_EQ(m.StateOf("job"), RunState::kRunning);
}

// A failure reported while the members still rejoin waits for the end of recovery; its grace
// deadline must not be the next deadline meanwhile: the tick ignores it during recovery, so it
// stayed in the past and the service's timer ticked without pause until the rejoin window closed.
TEST(AdoptRunsTest, AFailureDuringRecoveryWaitsForTheRejoinWindow) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 1, 2), kT0).size(), 1u);
  auto first = m.OnJoin(2, Join("n2", 1, 2), kT0);
  ASSERT_NE(Find<Assignment>(first, 1), nullptr);
  const Assignment held = *Find<Assignment>(first, 1);
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(1)).ok());
  ASSERT_NE(Find<Assignment>(m.OnJoin(5, RejoinWith("n1", held, 1), kT0 + absl::Seconds(2)), 5),
            nullptr);
  NodeReport failed;
  failed.round = held.round;
  failed.message = "rank 0 exited with code 1";
  EXPECT_TRUE(m.OnReport(5, failed, kT0 + absl::Seconds(3)).empty());
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(61));  // The rejoin window, not the grace.
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(4)).empty());
  // n2 never rejoins: the run fails with n1's failure.
  auto out = m.OnTick(kT0 + absl::Seconds(61));
  ASSERT_NE(Find<RunFinished>(out, 5), nullptr);
  EXPECT_FALSE(Find<RunFinished>(out, 5)->succeeded);
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
}

// A round held for node rank 0's next store, then node rank 0 is lost: the held round was sent
// to the one node left, a round of 1 node in a run of MIN 2. It is dropped instead, and the run
// waits for nodes up to its join timeout.
TEST(HeldRoundTest, AHeldRoundIsDroppedWhenTooFewNodesAreLeft) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 2, 2), kT0).size(), 1u);
  ASSERT_NE(Find<Assignment>(m.OnJoin(2, Join("n2", 2, 2), kT0), 1), nullptr);
  ASSERT_NE(Find<StopWorkers>(m.OnSessionClosed(2, kT0 + absl::Seconds(1)), 1), nullptr);
  // n3 makes MIN again, but n1's next store is not ready: the round is held.
  for (const Outgoing& o : m.OnJoin(3, Join("n3", 2, 2), kT0 + absl::Seconds(2))) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message));
  }
  for (const Outgoing& o : m.OnSessionClosed(1, kT0 + absl::Seconds(3))) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message)) << "to session " << o.session;
  }
  EXPECT_EQ(m.StateOf("job"), RunState::kGathering);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(3 + 600));
}

// Round 0's node rank 0 (n1) has not opened its next store, so the round that replaces round 0
// after each loss is held. When the waiting node leaves too, fewer than MIN nodes remain for the
// held round. Round 0, which lost two of its three members, stayed running with one: no
// StopWorkers, no join timeout, and the next node to come made a scale-up round with it (below
// MIN in a run of MIN 3, as the round state fuzzer found). It stops and the run waits instead.
TEST(HeldRoundTest, ARoundThatLostMembersStopsWhenItsHeldReplacementFallsBelowMin) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 2, 3), kT0);
  m.OnJoin(2, Join("n2", 2, 3), kT0);
  std::vector<Outgoing> round0 = m.OnJoin(3, Join("n3", 2, 3), kT0);
  const Assignment* first = Find<Assignment>(round0, 1);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->node_rank, 0);
  m.OnJoin(4, Join("n4", 2, 3), kT0);              // Waits: round 0 has MAX nodes.
  EXPECT_TRUE(m.OnSessionClosed(2, kT0).empty());  // Held: n1's next store is not ready.
  EXPECT_TRUE(m.OnSessionClosed(3, kT0).empty());
  std::vector<Outgoing> out = m.OnSessionClosed(4, kT0 + absl::Seconds(7));
  ASSERT_EQ(out.size(), 2u);  // StopWorkers, then the count the run waits on.
  const StopWorkers* stop = Find<StopWorkers>(out, 1);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(stop->round, 0);
  EXPECT_EQ(stop->reason,
            "node lost: node n3 (10.0.0.3) was lost; then nodes left: 1 connected before node "
            "rank 0's next store was ready; waiting up to 10m for at least 2 nodes");
  const JoinProgress* progress = Find<JoinProgress>(out, 1);
  ASSERT_NE(progress, nullptr);
  EXPECT_EQ(progress->joined_nodes, 1);
  EXPECT_EQ(m.StateOf("job"), RunState::kGathering);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(607));
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(60)).empty());  // No round of one node.
  m.OnStoreReady(1, StoreReady{30001}, kT0 + absl::Seconds(60));
  EXPECT_EQ(m.OnJoin(5, Join("n2", 2, 3), kT0 + absl::Seconds(61)).size(), 1u);  // Its count.
  std::vector<Outgoing> next = m.OnTick(kT0 + absl::Seconds(91));  // MIN after the last call.
  const Assignment* a1 = Find<Assignment>(next, 1);
  const Assignment* a5 = Find<Assignment>(next, 5);
  ASSERT_NE(a1, nullptr);
  ASSERT_NE(a5, nullptr);
  EXPECT_EQ(a1->round, 1);
  EXPECT_EQ(a1->node_rank, 0);
  EXPECT_EQ(a5->node_rank, 1);
  EXPECT_EQ(a5->master_port, 30001);
  EXPECT_EQ(a5->reason, "nodes rejoined");
}

// A failure reported (no restart left; one of the two members left) while the round replacing a
// lost member was held, then the waiting node leaves: too few nodes for the held round. The run
// went back to gathering with the failure's grace deadline still set, which a gathering run's tick
// never handles (a deadline left in the past: the busy tick). The failure ends the run, as after
// any loss.
TEST(HeldRoundTest, AFailureReportedWhileTheRoundWasHeldEndsTheRunWhenItFallsBelowMin) {
  RoundStateMachine m;
  m.OnJoin(1, Join("n1", 3, 3), kT0);
  m.OnJoin(2, Join("n2", 3, 3), kT0);
  ASSERT_NE(Find<Assignment>(m.OnJoin(3, Join("n3", 3, 3), kT0), 1), nullptr);
  m.OnJoin(4, Join("n4", 3, 3), kT0);              // Waits: round 0 has MAX nodes.
  EXPECT_TRUE(m.OnSessionClosed(3, kT0).empty());  // Held: n1's next store is not ready.
  NodeReport failed;
  failed.round = 0;
  failed.message = "rank 0 exited with code 3";
  failed.failure.emplace();
  failed.failure->exit_code = 3;
  failed.failure->time = kT0;
  EXPECT_TRUE(m.OnReport(1, failed, kT0).empty());  // No restart left: the failure's grace.
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(1));
  std::vector<Outgoing> out = m.OnSessionClosed(4, kT0 + absl::Milliseconds(500));
  ASSERT_EQ(out.size(), 2u);
  ASSERT_NE(Find<RunFinished>(out, 2), nullptr);
  const RunFinished* finished = Find<RunFinished>(out, 1);
  ASSERT_NE(finished, nullptr);
  EXPECT_FALSE(finished->succeeded);
  EXPECT_EQ(finished->message, "node n1 (node rank 0): rank 0 exited with code 3");
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
  EXPECT_TRUE(m.OnTick(kT0 + absl::Seconds(2)).empty());
  ASSERT_TRUE(m.NextDeadline().has_value());  // Only the closed run's retention.
  EXPECT_GT(*m.NextDeadline(), kT0 + absl::Seconds(2));
}

// Two failures of one round while its restart is held for node rank 0's next store: one restart
// round, counted once. Counted per failure, the round went out with a restart count above
// --max-restarts.
TEST(HeldRoundTest, TwoFailuresWhileTheRestartIsHeldCountOneRestart) {
  RoundStateMachine m;
  JoinRequest j1 = Join("n1", 2, 2);
  JoinRequest j2 = Join("n2", 2, 2);
  j1.max_restarts = j2.max_restarts = 1;
  ASSERT_EQ(m.OnJoin(1, j1, kT0).size(), 1u);
  ASSERT_NE(Find<Assignment>(m.OnJoin(2, j2, kT0), 1), nullptr);
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(1, failed, kT0 + absl::Seconds(1)).empty());  // Held: no store yet.
  EXPECT_TRUE(m.OnReport(2, failed, kT0 + absl::Seconds(2)).empty());
  auto out = m.OnStoreReady(1, StoreReady{30001}, kT0 + absl::Seconds(3));
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  ASSERT_NE(Find<Assignment>(out, 2), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 1);
  EXPECT_EQ(Find<Assignment>(out, 1)->restart_count, 1);
  EXPECT_EQ(Find<Assignment>(out, 2)->restart_count, 1);
}

// A restart held for node rank 0's next store, then the runs adopted: the members rejoin and
// report their failure again, which must not count a second restart.
TEST(AdoptRunsTest, AHeldRestartIsNotCountedAgainAfterAdoption) {
  RoundStateMachine m;
  JoinRequest j1 = Join("n1", 1, 1);
  j1.max_restarts = 1;
  auto first = m.OnJoin(1, j1, kT0);
  ASSERT_NE(Find<Assignment>(first, 1), nullptr);
  const Assignment held = *Find<Assignment>(first, 1);
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(1, failed, kT0 + absl::Seconds(1)).empty());  // Held: no store yet.
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(2)).ok());
  JoinRequest rejoin = j1;
  rejoin.rejoin = held;
  ASSERT_NE(Find<Assignment>(m.OnJoin(5, rejoin, kT0 + absl::Seconds(3)), 5), nullptr);
  EXPECT_TRUE(m.OnStoreReady(5, StoreReady{30001}, kT0 + absl::Seconds(4)).empty());
  auto out = m.OnReport(5, failed, kT0 + absl::Seconds(5));
  ASSERT_NE(Find<Assignment>(out, 5), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 5)->round, 1);
  EXPECT_EQ(Find<Assignment>(out, 5)->restart_count, 1);
}

// A node finished its part and left; the other one fails with restarts left. A restart round of
// the one node connected is below MIN (it was sent): the run fails with that failure instead.
TEST(RestartTest, NoRestartRoundBelowMinAfterANodeFinishedAndLeft) {
  RoundStateMachine m;
  JoinRequest j1 = Join("n1", 2, 2);
  JoinRequest j2 = Join("n2", 2, 2);
  j1.max_restarts = j2.max_restarts = 1;
  ASSERT_EQ(m.OnJoin(1, j1, kT0).size(), 1u);
  ASSERT_NE(Find<Assignment>(m.OnJoin(2, j2, kT0), 2), nullptr);
  EXPECT_TRUE(m.OnReport(1, Success(0), kT0 + absl::Seconds(1)).empty());
  EXPECT_TRUE(m.OnSessionClosed(1, kT0 + absl::Seconds(2)).empty());
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  for (const Outgoing& o : m.OnReport(2, failed, kT0 + absl::Seconds(3))) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message));
  }
  auto out = m.OnTick(kT0 + absl::Seconds(4));  // After the failure grace (1 s).
  ASSERT_NE(Find<RunFinished>(out, 2), nullptr);
  EXPECT_FALSE(Find<RunFinished>(out, 2)->succeeded);
  EXPECT_EQ(Find<RunFinished>(out, 2)->message,
            "node n2 (node rank 1): exited with code 1 (after 0 restart(s))");
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
}

// A scale-up was due for an adopted running run while its members were still rejoining: it was
// started with the one node that had re-attached, a round of 1 in a run of MIN 2. It waits for
// the end of recovery instead, like every other decision.
TEST(AdoptRunsTest, NoScaleUpWhileMembersRejoin) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 2, 4), kT0).size(), 1u);
  ASSERT_EQ(m.OnJoin(2, Join("n2", 2, 4), kT0).size(), 1u);
  ASSERT_NE(Find<Assignment>(m.OnTick(kT0 + absl::Seconds(30)), 1), nullptr);
  ASSERT_EQ(m.OnJoin(3, Join("n3", 2, 4), kT0 + absl::Seconds(31)).size(), 1u);
  ASSERT_EQ(m.NextDeadline(), kT0 + absl::Seconds(61));  // The scale-up.
  ASSERT_TRUE(m.AdoptRuns(kT0 + absl::Seconds(32)).ok());
  m.OnJoin(7, Join("n1", 2, 4), kT0 + absl::Seconds(33));  // A plain join, not a rejoin.
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(92));    // The rejoin window.
  for (const Outgoing& o : m.OnTick(kT0 + absl::Seconds(61))) {
    EXPECT_FALSE(std::holds_alternative<Assignment>(o.message)) << "to session " << o.session;
  }
}

// A node reports a failure (its grace deadline starts), then a success for the same round: the
// failure stands, and the run fails with it. Counted as a success, the run ended as succeeded with
// the grace deadline still set: in the past, it made the service's timer tick without pause for
// the hour a closed run is kept.
TEST(RestartTest, ASuccessAfterAFailureOfTheSameRoundDoesNotCount) {
  RoundStateMachine m;
  ASSERT_EQ(m.OnJoin(1, Join("n1", 1, 2), kT0).size(), 1u);
  auto first = m.OnJoin(2, Join("n2", 1, 2), kT0);
  ASSERT_NE(Find<Assignment>(first, 1), nullptr);
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(1, failed, kT0 + absl::Seconds(1)).empty());
  EXPECT_TRUE(m.OnReport(2, Success(0), kT0 + absl::Seconds(1)).empty());
  EXPECT_TRUE(m.OnReport(1, Success(0), kT0 + absl::Seconds(1)).empty());
  auto out = m.OnTick(kT0 + absl::Seconds(2));  // The failure grace (1 s) is over.
  ASSERT_NE(Find<RunFinished>(out, 1), nullptr);
  EXPECT_FALSE(Find<RunFinished>(out, 1)->succeeded);
  EXPECT_EQ(m.NextDeadline(), kT0 + absl::Seconds(2) + absl::Hours(1));
}

// The reverse: a node's success stands against its later failure of the same round. Counted, the
// failure (with a restart left) restarted a round whose node had finished its part.
TEST(RestartTest, AFailureAfterASuccessOfTheSameRoundDoesNotCount) {
  RoundStateMachine m;
  JoinRequest j1 = Join("n1", 2, 2);
  JoinRequest j2 = Join("n2", 2, 2);
  j1.max_restarts = j2.max_restarts = 1;
  m.OnJoin(1, j1, kT0);
  ASSERT_NE(Find<Assignment>(m.OnJoin(2, j2, kT0), 1), nullptr);
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(1, Success(0), kT0 + absl::Seconds(1)).empty());
  EXPECT_TRUE(m.OnReport(1, failed, kT0 + absl::Seconds(1)).empty());
  auto out = m.OnReport(2, Success(0), kT0 + absl::Seconds(2));
  ASSERT_NE(Find<RunFinished>(out, 1), nullptr);
  EXPECT_TRUE(Find<RunFinished>(out, 1)->succeeded);
  EXPECT_EQ(Find<RunFinished>(out, 1)->message, "all 2 nodes succeeded");
}

// A run re-created from rejoins (the service lost its memory): n1 rejoined, finished its part and
// left; n2's failure (a restart left) waited for the rejoins; n3's rejoin completed them. The
// restart round went out to the 2 connected nodes of a run of MIN 3. The failure ends the run.
TEST(AdoptRunsTest, ADeferredRestartNeedsMinConnectedNodesWhenTheRejoinsComplete) {
  std::map<std::string, Assignment> held;
  {
    RoundStateMachine first;
    for (int i = 1; i <= 3; ++i) {
      JoinRequest j = Join(absl::StrCat("n", i), 3, 3);
      j.max_restarts = 1;
      for (const Outgoing& o : first.OnJoin(i, j, kT0)) {
        if (const auto* a = std::get_if<Assignment>(&o.message)) {
          held[absl::StrCat("n", o.session)] = *a;
        }
      }
    }
  }
  ASSERT_EQ(held.size(), 3u);
  RoundStateMachine m;  // A restart that lost the service's memory.
  auto rejoin = [&](SessionId s, const std::string& id) {
    JoinRequest j = Join(id, 3, 3);
    j.max_restarts = 1;
    j.rejoin = held[id];
    return m.OnJoin(s, j, kT0 + absl::Seconds(1));
  };
  ASSERT_NE(Find<Assignment>(rejoin(12, "n2"), 12), nullptr);
  ASSERT_NE(Find<Assignment>(rejoin(11, "n1"), 11), nullptr);
  EXPECT_TRUE(m.OnReport(11, Success(0), kT0 + absl::Seconds(1)).empty());
  EXPECT_TRUE(m.OnSessionClosed(11, kT0 + absl::Seconds(1)).empty());
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(12, failed, kT0 + absl::Seconds(1)).empty());  // Deferred.
  std::vector<Outgoing> out = rejoin(13, "n3");
  EXPECT_EQ(Find<Assignment>(out, 12), nullptr);  // No restart round.
  const RunFinished* finished = Find<RunFinished>(out, 12);
  ASSERT_NE(finished, nullptr);
  EXPECT_FALSE(finished->succeeded);
  EXPECT_EQ(finished->message,
            "node n2 (node rank 1): exited with code 1; no restart: only 2 of at least 3 nodes are "
            "connected");
  EXPECT_NE(Find<RunFinished>(out, 13), nullptr);
  EXPECT_EQ(m.StateOf("job"), RunState::kClosed);
}

// A restart held for node rank 0's next store, then node rank 0 leaves and another failure starts
// the restart round with a new node rank 0: one round, one restart. The held restart was added to
// the new one's, a restart count above --max-restarts.
TEST(HeldRoundTest, AHeldRestartAndTheNextFailureCountOneRestart) {
  RoundStateMachine m;
  std::vector<JoinRequest> joins = {Join("n1", 1, 3), Join("n2", 1, 3), Join("n3", 1, 3)};
  for (JoinRequest& j : joins) j.max_restarts = 1;
  m.OnJoin(1, joins[0], kT0);
  m.OnJoin(2, joins[1], kT0);
  ASSERT_NE(Find<Assignment>(m.OnJoin(3, joins[2], kT0), 3), nullptr);  // At MAX: round 0.
  NodeReport failed;
  failed.round = 0;
  failed.message = "exited with code 1";
  EXPECT_TRUE(m.OnReport(3, failed, kT0 + absl::Seconds(1)).empty());  // Held: n1's store.
  EXPECT_TRUE(m.OnReport(1, Success(0), kT0 + absl::Seconds(2)).empty());
  EXPECT_TRUE(m.OnSessionClosed(1, kT0 + absl::Seconds(3)).empty());
  auto out = m.OnReport(2, failed, kT0 + absl::Seconds(4));
  ASSERT_NE(Find<Assignment>(out, 2), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 2)->round, 1);
  EXPECT_EQ(Find<Assignment>(out, 2)->restart_count, 1);
}

TEST(AdoptRunsTest, AFailedCommitSendsNothingUntilTheRunsAreAdoptedAgain) {
  FailingBackend backend;
  RoundStateOptions options;
  options.backend = &backend;
  RoundStateMachine m(options);
  ASSERT_EQ(m.OnJoin(1, Join("n1", 2, 2), kT0).size(), 1u);
  backend.fail = absl::FailedPreconditionError("fenced: test");
  // This join would close the round (two Assignments): its commit fails, nothing is sent.
  EXPECT_TRUE(m.OnJoin(2, Join("n2", 2, 2), kT0).empty());
  EXPECT_EQ(m.commit_failure(), absl::FailedPreconditionError("fenced: test"));
  EXPECT_EQ(m.counters().failed_commits, 1u);
  const int commits = backend.commits;
  // Until AdoptRuns, no event is handled (or written).
  EXPECT_TRUE(m.OnTick(kT0 + absl::Hours(2)).empty());
  EXPECT_TRUE(m.OnSessionClosed(1, kT0).empty());
  EXPECT_EQ(backend.commits, commits);
  EXPECT_EQ(m.counters().failed_commits, 1u);
  // Adopting fails while the store does not answer, and the failure stays.
  backend.reload = absl::UnavailableError("etcd down");
  EXPECT_EQ(m.AdoptRuns(kT0), absl::UnavailableError("etcd down"));
  EXPECT_FALSE(m.commit_failure().ok());
  backend.reload = absl::OkStatus();
  backend.fail = absl::OkStatus();
  ASSERT_TRUE(m.AdoptRuns(kT0).ok());
  EXPECT_TRUE(m.commit_failure().ok());
  auto out = m.OnJoin(3, Join("n3", 2, 2), kT0);
  EXPECT_EQ(Find<Refusal>(out, 3), nullptr);
}

TEST(GroupCommitTest, ABatchOfEventsCommitsEachTouchedRunOnce) {
  FailingBackend backend;
  RoundStateOptions options;
  options.backend = &backend;
  RoundStateMachine m(options);
  m.BeginBatch();
  EXPECT_TRUE(m.in_batch());
  // Three joins of a run of 3 and one of another run: handled in order (the third closes the
  // round with every node's assignment), nothing written yet.
  std::vector<Outgoing> out;
  for (int i = 1; i <= 3; ++i) {
    for (auto& o : m.OnJoin(i, Join(absl::StrCat("n", i), 3, 3), kT0)) out.push_back(o);
  }
  JoinRequest other = Join("m1", 1, 2);
  other.run_id = "other";
  for (auto& o : m.OnJoin(4, other, kT0)) out.push_back(o);
  EXPECT_EQ(backend.commits, 0);
  ASSERT_TRUE(m.EndBatch().ok());
  EXPECT_FALSE(m.in_batch());
  // One write per run, not one per event.
  EXPECT_EQ(backend.commits, 2);
  for (SessionId s = 1; s <= 3; ++s) {
    const Assignment* a = Find<Assignment>(out, s);
    ASSERT_NE(a, nullptr) << "session " << s;
    EXPECT_EQ(a->node_rank, static_cast<int32_t>(s - 1));
    EXPECT_EQ(a->world_size, 6);
  }
  EXPECT_EQ(m.StateOf("job"), RunState::kRunning);
  EXPECT_EQ(m.StateOf("other"), RunState::kGathering);
  // Outside a batch each event commits at its end.
  JoinRequest second = Join("m2", 1, 2);
  second.run_id = "other";
  EXPECT_NE(Find<Assignment>(m.OnJoin(5, second, kT0), 5), nullptr);
  EXPECT_EQ(backend.commits, 3);
}

TEST(GroupCommitTest, AFailedBatchCommitFailsOnceAndHandlesNothingMore) {
  FailingBackend backend;
  RoundStateOptions options;
  options.backend = &backend;
  RoundStateMachine m(options);
  m.BeginBatch();
  EXPECT_EQ(m.OnJoin(1, Join("n1", 2, 2), kT0).size(), 1u);
  // The round closes in the batch: the caller holds these until EndBatch (and drops them).
  std::vector<Outgoing> held = m.OnJoin(2, Join("n2", 2, 2), kT0);
  EXPECT_NE(Find<Assignment>(held, 1), nullptr);
  EXPECT_NE(Find<Assignment>(held, 2), nullptr);
  EXPECT_EQ(backend.commits, 0);
  backend.fail = absl::UnavailableError("etcd down");
  EXPECT_EQ(m.EndBatch(), absl::UnavailableError("etcd down"));
  EXPECT_EQ(backend.commits, 1);
  EXPECT_EQ(m.counters().failed_commits, 1u);
  // A later batch handles nothing and is not counted again.
  m.BeginBatch();
  EXPECT_TRUE(m.OnJoin(3, Join("n3", 2, 2), kT0).empty());
  EXPECT_EQ(m.EndBatch(), absl::UnavailableError("etcd down"));
  EXPECT_EQ(backend.commits, 1);
  EXPECT_EQ(m.counters().failed_commits, 1u);
}

// A backend that holds at most 2 nodes per run in one write (as etcd's request limit).
class SmallWriteBackend final : public ForwardingRunStateBackend {
 public:
  absl::Status CheckRunFits(int64_t nodes, absl::string_view node_id,
                            absl::string_view address) const override {
    asked.push_back(absl::StrCat(nodes, " ", node_id, " ", address));
    if (nodes <= 2) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(nodes, " nodes do not fit"));
  }
  mutable std::vector<std::string> asked;
};

TEST(RoundStateBackendLimitTest, ARunTheBackendCannotWriteInOneRoundIsRefusedAtItsFirstJoin) {
  SmallWriteBackend backend;
  RoundStateOptions options;
  options.backend = &backend;
  RoundStateMachine m(options);
  JoinRequest big = Join("n1", 1, 3);
  std::vector<Outgoing> out = m.OnJoin(1, big, kT0);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<Refusal>(out[0].message));
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.message(), "3 nodes do not fit");
  EXPECT_TRUE(out[0].close);
  EXPECT_EQ(backend.Find("job"), nullptr);  // Nothing stored.
  // Spares count: MAX 2 with one spare is 3 nodes in the record.
  JoinRequest spare = Join("n1", 1, 2);
  spare.spare_nodes = 1;
  out = m.OnJoin(2, spare, kT0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Refusal>(out[0].message).status.message(), "3 nodes do not fit");
  // A run that fits joins as before.
  out = m.OnJoin(3, Join("n1", 1, 2), kT0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(std::holds_alternative<Refusal>(out[0].message));
  EXPECT_NE(backend.Find("job"), nullptr);
  EXPECT_EQ(backend.asked,
            (std::vector<std::string>{"3 n1 10.0.0.1", "3 n1 10.0.0.1", "2 n1 10.0.0.1"}));
}

}  // namespace
}  // namespace dgt::rendezvous
