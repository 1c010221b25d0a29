#include "agent/lifecycle/restart_policy.h"

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

class FakeClock final : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

using Action = RestartTracker::Action;

TEST(RestartTrackerTest, GroupRestartsUpToMaxThenFails) {
  FakeClock clock;
  RestartTracker t({RestartPolicy::kGroup, /*max_restarts=*/2, /*node_count=*/1, /*shrink=*/false,
                    RestartBackend::kStatic},
                   &clock);
  auto d = t.OnFailure(/*rank=*/1, /*attempt=*/0);
  EXPECT_EQ(d.action, Action::kRestartGroup);
  EXPECT_EQ(d.restart_count, 1);
  // Rank 2 of attempt 0 dies while the group stops: it does not consume a restart.
  clock.Advance(absl::Milliseconds(5));
  d = t.OnFailure(2, 0);
  EXPECT_EQ(d.action, Action::kIgnore);
  EXPECT_EQ(d.reason, "rank 2 of attempt 0 is already replaced");
  EXPECT_EQ(t.restarts(), 1);
  clock.Advance(absl::Seconds(1));
  d = t.OnFailure(0, 1);
  EXPECT_EQ(d.action, Action::kRestartGroup);
  EXPECT_EQ(d.restart_count, 2);
  d = t.OnFailure(0, 2);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.reason, "--max-restarts=2 exhausted");
  EXPECT_EQ(t.restarts(), 2);
  ASSERT_EQ(t.history().size(), 4u);
  EXPECT_EQ(t.history()[0].time, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(t.history()[1].time, absl::FromUnixSeconds(1700000000) + absl::Milliseconds(5));
  EXPECT_EQ(t.history()[3].action, Action::kFail);
}

TEST(RestartTrackerTest, NoRestartsByDefault) {
  FakeClock clock;
  RestartTracker t({RestartPolicy::kGroup, 0, 1, false, RestartBackend::kStatic}, &clock);
  auto d = t.OnFailure(0, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.restart_count, 0);
  EXPECT_EQ(d.reason, "--max-restarts=0 exhausted");
}

TEST(RestartTrackerTest, StaticGroupAcrossNodesFailsAndSaysWhy) {
  FakeClock clock;
  RestartTracker t({RestartPolicy::kGroup, 3, 2, false, RestartBackend::kStatic}, &clock);
  auto d = t.OnFailure(3, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.restart_count, 0);
  EXPECT_EQ(d.reason,
            "the static backend restarts a group only with --nnodes=1, this job has 2 nodes");
  EXPECT_EQ(t.restarts(), 0);
  t.OnNewRound(1);  // Membership change: no restart consumed.
  EXPECT_EQ(t.restarts(), 0);
  EXPECT_EQ(t.OnFailure(0, 0).action, Action::kRestartGroup);
}

TEST(RestartTrackerTest, RendezvousGroupAlwaysReportsAndConsumesNothingLocally) {
  FakeClock clock;
  // The service counts group restarts against the JoinRequest's max_restarts, so the agent's own
  // budget neither allows nor forbids one.
  for (int max_restarts : {0, 1, 5}) {
    for (int nodes : {1, 3}) {
      RestartTracker t({RestartPolicy::kGroup, max_restarts, nodes}, &clock);
      auto d = t.OnFailure(2, 4);
      EXPECT_EQ(d.action, Action::kReportToRendezvous) << max_restarts << " " << nodes;
      EXPECT_EQ(d.restart_count, 4);
      EXPECT_EQ(d.reason, "group restarts are rounds of the rendezvous service");
      EXPECT_EQ(t.restarts(), 0);
      EXPECT_EQ(t.attempt(2), 0);
    }
  }
}

// Every cell of the table in restart_policy.h: policy x backend x nodes x budget.
TEST(RestartTrackerTest, DecisionTableEveryCell) {
  struct Row {
    RestartPolicy policy;
    bool shrink;
    RestartBackend backend;
    int nodes;
    bool restarts_left;
    Action expected;
  };
  using P = RestartPolicy;
  using B = RestartBackend;
  const Row rows[] = {
      {P::kGroup, false, B::kRendezvous, 1, true, Action::kReportToRendezvous},
      {P::kGroup, false, B::kRendezvous, 1, false, Action::kReportToRendezvous},
      {P::kGroup, false, B::kRendezvous, 4, true, Action::kReportToRendezvous},
      {P::kGroup, false, B::kRendezvous, 4, false, Action::kReportToRendezvous},
      {P::kGroup, false, B::kStatic, 1, true, Action::kRestartGroup},
      {P::kGroup, false, B::kStatic, 1, false, Action::kFail},
      {P::kGroup, false, B::kStatic, 4, true, Action::kFail},
      {P::kGroup, false, B::kStatic, 4, false, Action::kFail},
      {P::kRank, false, B::kRendezvous, 1, true, Action::kRestartRank},
      {P::kRank, false, B::kRendezvous, 1, false, Action::kFail},
      {P::kRank, false, B::kRendezvous, 4, true, Action::kRestartRank},
      {P::kRank, false, B::kRendezvous, 4, false, Action::kFail},
      {P::kRank, false, B::kStatic, 1, true, Action::kRestartRank},
      {P::kRank, false, B::kStatic, 1, false, Action::kFail},
      {P::kRank, false, B::kStatic, 4, true, Action::kRestartRank},
      {P::kRank, false, B::kStatic, 4, false, Action::kFail},
      {P::kRank, true, B::kRendezvous, 1, true, Action::kDropRank},
      {P::kRank, true, B::kRendezvous, 1, false, Action::kFail},
      {P::kRank, true, B::kRendezvous, 4, true, Action::kDropRank},
      {P::kRank, true, B::kRendezvous, 4, false, Action::kFail},
      {P::kRank, true, B::kStatic, 1, true, Action::kDropRank},
      {P::kRank, true, B::kStatic, 1, false, Action::kFail},
      {P::kRank, true, B::kStatic, 4, true, Action::kDropRank},
      {P::kRank, true, B::kStatic, 4, false, Action::kFail},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(::testing::Message()
                 << "policy " << static_cast<int>(r.policy) << " shrink " << r.shrink << " backend "
                 << static_cast<int>(r.backend) << " nodes " << r.nodes << " restarts left "
                 << r.restarts_left);
    EXPECT_EQ(RestartTracker::Decide(r.policy, r.shrink, r.backend, r.nodes, r.restarts_left),
              r.expected);
    // The tracker applies the same table: a budget of 1 is left, of 0 is used up.
    FakeClock clock;
    RestartTracker t({r.policy, r.restarts_left ? 1 : 0, r.nodes, r.shrink, r.backend}, &clock);
    EXPECT_EQ(t.OnFailure(0, 0).action, r.expected);
  }
}

TEST(RestartTrackerTest, RankPolicyCountsPerRankGenerationsAndSharesTheBudget) {
  FakeClock clock;
  RestartTracker t({RestartPolicy::kRank, 3, 2}, &clock);
  auto d = t.OnFailure(1, 0);
  EXPECT_EQ(d.action, Action::kRestartRank);
  EXPECT_EQ(d.restart_count, 1);
  EXPECT_EQ(t.attempt(1), 1);
  EXPECT_EQ(t.attempt(0), 0);
  d = t.OnFailure(0, 0);
  EXPECT_EQ(d.action, Action::kRestartRank);
  EXPECT_EQ(d.restart_count, 1);
  d = t.OnFailure(1, 1);
  EXPECT_EQ(d.action, Action::kRestartRank);
  EXPECT_EQ(d.restart_count, 2);
  // A stale report about rank 1's first process changes nothing.
  EXPECT_EQ(t.OnFailure(1, 0).action, Action::kIgnore);
  d = t.OnFailure(2, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.reason, "--max-restarts=3 exhausted");
  EXPECT_EQ(t.restarts(), 3);
}

TEST(RestartTrackerTest, ShrinkDropsFailedRanksAndSharesTheBudget) {
  FakeClock clock;
  RestartTracker::Options o;
  o.policy = RestartPolicy::kRank;
  o.max_restarts = 2;
  o.node_count = 2;
  o.shrink = true;
  RestartTracker t(o, &clock);
  auto d = t.OnFailure(3, 0);
  EXPECT_EQ(d.action, Action::kDropRank);
  EXPECT_EQ(d.restart_count, 0);  // Nothing is started: the attempt stays.
  EXPECT_EQ(d.reason, "rank 3 dropped (--recovery-mode=shrink)");
  EXPECT_EQ(t.restarts(), 1);
  // A second report of the same process changes nothing.
  EXPECT_EQ(t.OnFailure(3, 0).action, Action::kIgnore);
  EXPECT_EQ(t.restarts(), 1);
  EXPECT_EQ(t.OnFailure(1, 0).action, Action::kDropRank);
  d = t.OnFailure(0, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.reason, "--max-restarts=2 exhausted");
  ASSERT_EQ(t.history().size(), 4u);
  EXPECT_EQ(t.history()[0].action, Action::kDropRank);
  EXPECT_EQ(t.history()[0].rank, 3);
}

TEST(RestartTrackerTest, ShrinkWithoutRestartsFailsLikeTheOtherPolicies) {
  FakeClock clock;
  RestartTracker::Options o;
  o.policy = RestartPolicy::kRank;
  o.shrink = true;
  RestartTracker t(o, &clock);
  auto d = t.OnFailure(0, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.reason, "--max-restarts=0 exhausted");
}

}  // namespace
}  // namespace dgt::agent
