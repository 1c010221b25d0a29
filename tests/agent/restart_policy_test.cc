#include "agent/restart_policy.h"

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
  RestartTracker t({RestartPolicy::kGroup, /*max_restarts=*/2, /*node_count=*/1}, &clock);
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
  RestartTracker t({RestartPolicy::kGroup, 0, 1}, &clock);
  auto d = t.OnFailure(0, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.restart_count, 0);
  EXPECT_EQ(d.reason, "--max-restarts=0 exhausted");
}

TEST(RestartTrackerTest, GroupAcrossNodesFailsUntilRoundsCanRestart) {
  FakeClock clock;
  RestartTracker t({RestartPolicy::kGroup, 3, 2}, &clock);
  auto d = t.OnFailure(3, 0);
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.reason, "group restarts across several nodes are not supported yet");
  EXPECT_EQ(t.restarts(), 0);
  t.OnNewRound(1);  // Membership change: no restart consumed.
  EXPECT_EQ(t.restarts(), 0);
  EXPECT_EQ(t.OnFailure(0, 0).action, Action::kRestartGroup);
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
