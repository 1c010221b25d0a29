// SessionPolicy (agent/lifecycle/session_policy.h) on a simulated clock. The scenario tests drive
// it the way the Agent does, through fake replicas that answer a session scriptedly (the leader
// takes it, a standby ends it with its answer, a replica that is down refuses the connection),
// and assert the exact times and exit statuses of its decisions.
#include "agent/lifecycle/session_policy.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

using Step = SessionPolicy::Step;

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

SessionPolicy::Options Opts(bool several = false) {
  SessionPolicy::Options o;
  o.reconnect_timeout = absl::Seconds(60);
  o.connect_timeout = absl::Seconds(30);
  o.several = several;
  return o;
}

// One replica of the service as a session sees it.
enum class Replica {
  kDown,     // The connection is refused: the attempt fails.
  kStandby,  // The stream opens, then ends with the standby's answer.
  kLeader,   // The stream opens and the service answers the join.
};

// The Agent's use of SessionPolicy over fake replicas: the endpoint rotation moves to the next
// replica after each failed attempt or end, with a fixed 100 ms pause, on a simulated clock.
class FakeSession {
 public:
  FakeSession(std::vector<std::string> endpoints, SessionPolicy::Options options)
      : endpoints_(std::move(endpoints)), policy_(options) {}

  SessionPolicy& policy() { return policy_; }
  absl::Time now() const { return now_; }
  const std::string& current() const { return endpoints_[index_]; }
  void Set(const std::string& endpoint, Replica r) { replicas_[endpoint] = r; }
  void Advance(absl::Duration d) { now_ += d; }

  // The first session opens at the current replica and the service answers the join.
  void Join() {
    policy_.OnFirstOpened(now_);
    Deliver();
  }

  // The stream of the current session ends (its closed callback): the session is lost.
  SessionPolicy::Lost Lose(NodeState state = NodeState::kRunning, bool group_restart_left = true) {
    policy_.OnClosed();
    std::optional<std::string> standby;
    if (replicas_[current()] == Replica::kStandby) standby = StandbyAnswer(current());
    SessionPolicy::Lost lost = policy_.OnLost(current(), standby, now_, state, group_restart_left);
    Rotate();
    return lost;
  }

  // The reconnect loop until the policy decides something other than another attempt, or the
  // service answers a fresh join (kIdle). `rejoin_round`: what the joins ask back.
  Step Reconnect(std::optional<int64_t> rejoin_round = std::nullopt) {
    while (true) {
      const Step step = policy_.NextStep(now_);
      if (step != Step::kAttempt) return step;
      Advance(absl::Milliseconds(100));  // The rotation's pause.
      policy_.NewAttempt();
      ++attempts_;
      if (replicas_[current()] == Replica::kDown) {
        Rotate();
        continue;
      }
      policy_.OnReopened(rejoin_round);
      if (replicas_[current()] == Replica::kStandby) {
        Lose();
        continue;
      }
      if (rejoin_round) return Step::kAttempt;  // The rejoin awaits its Assignment.
      Deliver();
    }
  }

  int attempts() const { return attempts_; }
  const SessionPolicy::Answer& last_answer() const { return last_answer_; }

  static std::string StandbyAnswer(const std::string& endpoint) {
    return "dgt-rendezvous replica r2 is a standby; the leader is " + endpoint + "-leader";
  }

 private:
  void Deliver() { last_answer_ = policy_.OnAnswer(current()); }
  void Rotate() { index_ = (index_ + 1) % endpoints_.size(); }

  std::vector<std::string> endpoints_;
  SessionPolicy policy_;
  std::map<std::string, Replica> replicas_;
  size_t index_ = 0;
  absl::Time now_ = kStart;
  int attempts_ = 0;
  SessionPolicy::Answer last_answer_;
};

TEST(SessionPolicyTest, LostServiceIsTriedForTheReadTimeoutThenTheWindowIsOver) {
  FakeSession s({"a:1"}, Opts());
  s.Set("a:1", Replica::kLeader);
  s.Join();
  EXPECT_TRUE(s.last_answer().accepted_now);
  EXPECT_FALSE(s.policy().lost());
  s.Advance(absl::Seconds(5));
  s.Set("a:1", Replica::kDown);
  const SessionPolicy::Lost lost = s.Lose();
  EXPECT_TRUE(lost.first);
  EXPECT_TRUE(lost.was_accepted);
  EXPECT_FALSE(lost.standby);
  EXPECT_FALSE(lost.poll_marks);
  EXPECT_TRUE(s.policy().lost());
  EXPECT_EQ(s.policy().WindowLeft(s.now()), absl::Seconds(60));
  EXPECT_EQ(s.policy().NextStep(kStart + absl::Seconds(65) - absl::Nanoseconds(1)), Step::kAttempt);
  EXPECT_EQ(s.Reconnect(), Step::kWindowOver);
  // The window is the read timeout from the loss: 5 s + 60 s, in 100 ms attempts.
  EXPECT_EQ(s.now(), kStart + absl::Seconds(65));
  EXPECT_EQ(s.attempts(), 600);
  EXPECT_EQ(s.policy().LostFor(s.now()), absl::Seconds(60));
  EXPECT_EQ(s.policy().WindowLeft(s.now()), absl::ZeroDuration());
}

TEST(SessionPolicyTest, ALaterLossDoesNotExtendTheWindow) {
  FakeSession s({"a:1"}, Opts());
  s.Set("a:1", Replica::kLeader);
  s.Join();
  s.Set("a:1", Replica::kDown);
  EXPECT_TRUE(s.Lose().first);
  s.Advance(absl::Seconds(20));
  const SessionPolicy::Lost again = s.Lose();
  EXPECT_FALSE(again.first);
  EXPECT_FALSE(again.was_accepted);  // The service never took the failed attempt.
  EXPECT_EQ(s.policy().WindowLeft(s.now()), absl::Seconds(40));
  EXPECT_EQ(s.policy().LostFor(s.now()), absl::Seconds(20));
}

TEST(SessionPolicyTest, ServiceBackForAFreshJoinEndsTheWindow) {
  FakeSession s({"a:1", "b:2"}, Opts(/*several=*/true));
  s.Set("a:1", Replica::kLeader);
  s.Join();
  s.Advance(absl::Seconds(1));
  s.Set("a:1", Replica::kDown);
  s.Set("b:2", Replica::kLeader);  // Another replica took over the leadership.
  s.Lose();
  EXPECT_EQ(s.Reconnect(), Step::kIdle);
  EXPECT_TRUE(s.last_answer().accepted_now);
  EXPECT_TRUE(s.last_answer().service_back);
  EXPECT_EQ(s.last_answer().took_over_from, "a:1");
  EXPECT_FALSE(s.policy().lost());
  EXPECT_EQ(s.policy().LostFor(s.now()), absl::ZeroDuration());
  EXPECT_TRUE(s.policy().ever_accepted());
  EXPECT_TRUE(s.policy().open());
}

TEST(SessionPolicyTest, EveryReplicaAStandbyEndsTheAgentAtTheConnectTimeoutWith69) {
  FakeSession s({"a:1", "b:2"}, Opts(/*several=*/true));
  s.Set("a:1", Replica::kStandby);
  s.Set("b:2", Replica::kStandby);
  s.policy().OnFirstOpened(s.now());  // a:1's stream opens; it ends with a standby's answer.
  const SessionPolicy::Lost first = s.Lose();
  EXPECT_TRUE(first.first);
  EXPECT_FALSE(first.was_accepted);
  EXPECT_TRUE(first.standby);
  EXPECT_TRUE(first.standby_changed);
  EXPECT_TRUE(s.policy().AnsweredAsStandby("a:1"));
  EXPECT_FALSE(s.policy().AnsweredAsStandby("b:2"));
  EXPECT_EQ(s.Reconnect(), Step::kNoLeader);
  // At --rdzv-connect-timeout (30 s), not at the read timeout (60 s).
  EXPECT_EQ(s.now(), kStart + absl::Seconds(30));
  EXPECT_EQ(SessionPolicy::NoLeaderExitStatus(), 69);
  EXPECT_EQ(s.policy().NoLeaderMessage({"a:1", "b:2", "c:3"}),
            "no rendezvous replica of 3 took the session within 30s: every one that answered is "
            "a standby (a:1: dgt-rendezvous replica r2 is a standby; the leader is a:1-leader; "
            "b:2: dgt-rendezvous replica r2 is a standby; the leader is b:2-leader; c:3: no "
            "answer); is the leader's address in --rdzv-endpoint? see "
            "--rdzv-connect-timeout");
}

TEST(SessionPolicyTest, TheSameStandbyAnswerAgainIsNotAChange) {
  FakeSession s({"a:1"}, Opts(/*several=*/true));
  s.Set("a:1", Replica::kStandby);
  s.policy().OnFirstOpened(s.now());
  EXPECT_TRUE(s.Lose().standby_changed);
  EXPECT_FALSE(s.Lose().standby_changed);
}

TEST(SessionPolicyTest, StandbysAfterAnAcceptedSessionWaitOutTheReadTimeout) {
  FakeSession s({"a:1", "b:2"}, Opts(/*several=*/true));
  s.Set("a:1", Replica::kLeader);
  s.Join();
  s.Set("a:1", Replica::kStandby);
  s.Set("b:2", Replica::kStandby);
  s.Lose();
  // A session was accepted once: no connect timeout any more, the read timeout decides.
  EXPECT_EQ(s.Reconnect(), Step::kWindowOver);
  EXPECT_EQ(s.now(), kStart + absl::Seconds(60));
}

TEST(SessionPolicyTest, RejoinKeepsTheWindowUntilTheRoundComesBack) {
  FakeSession s({"a:1"}, Opts());
  s.Set("a:1", Replica::kLeader);
  s.Join();
  s.Lose(NodeState::kRunning);
  EXPECT_EQ(s.Reconnect(/*rejoin_round=*/3), Step::kAttempt);
  EXPECT_EQ(s.policy().rejoin_round(), std::optional<int64_t>(3));
  // A Progress before the Assignment: the service is there, but the round is not back yet.
  const SessionPolicy::Answer answer = s.policy().OnAnswer("a:1");
  EXPECT_TRUE(answer.accepted_now);
  EXPECT_FALSE(answer.service_back);
  EXPECT_TRUE(s.policy().lost());
  s.policy().OnRejoined();
  EXPECT_FALSE(s.policy().lost());
  EXPECT_EQ(s.policy().rejoin_round(), std::nullopt);
  EXPECT_EQ(s.policy().NextStep(s.now()), Step::kIdle);
}

TEST(SessionPolicyTest, ARefusedRejoinEndsTheWindowAndLeavesTheRun) {
  FakeSession s({"a:1"}, Opts());
  s.Set("a:1", Replica::kLeader);
  s.Join();
  s.Lose();
  s.Reconnect(/*rejoin_round=*/2);
  EXPECT_TRUE(s.policy().OnRefused(NodeState::kRunning));
  EXPECT_FALSE(s.policy().lost());
  EXPECT_EQ(s.policy().rejoin_round(), std::nullopt);
  // Without a rejoin pending, an Error is not a rejoin's answer.
  EXPECT_FALSE(s.policy().OnRefused(NodeState::kRunning));
}

TEST(SessionPolicyTest, ARefusalWhileJoiningIsNotARejoinsAnswer) {
  SessionPolicy p(Opts());
  p.OnReopened(4);
  EXPECT_FALSE(p.OnRefused(NodeState::kJoining));
  EXPECT_EQ(p.rejoin_round(), std::optional<int64_t>(4));
}

TEST(SessionPolicyTest, DoneMarksAreReadWhileAwaitingTheOutcomeOrWithoutARestartLeft) {
  SessionPolicy p(Opts());
  EXPECT_TRUE(p.OnLost("a:1", std::nullopt, kStart, NodeState::kAwaitingOutcome, true).poll_marks);
  EXPECT_TRUE(p.OnLost("a:1", std::nullopt, kStart, NodeState::kRunning, false).poll_marks);
  EXPECT_FALSE(p.OnLost("a:1", std::nullopt, kStart, NodeState::kRunning, true).poll_marks);
  EXPECT_FALSE(p.OnLost("a:1", std::nullopt, kStart, NodeState::kStopping, false).poll_marks);
  EXPECT_FALSE(p.OnLost("a:1", std::nullopt, kStart, NodeState::kJoining, false).poll_marks);
}

TEST(SessionPolicyTest, GenerationsDropTheCallbacksOfReplacedSessions) {
  SessionPolicy p(Opts());
  EXPECT_EQ(p.generation(), 0u);
  p.OnFirstOpened(kStart);
  EXPECT_TRUE(p.open());
  const uint64_t gen = p.NewAttempt();
  EXPECT_EQ(gen, 1u);
  EXPECT_FALSE(p.open());
  EXPECT_FALSE(p.IsCurrent(0));
  EXPECT_TRUE(p.IsCurrent(1));
  p.Retire();
  EXPECT_FALSE(p.IsCurrent(1));
}

TEST(SessionPolicyTest, NotLostMeansNothingToDo) {
  SessionPolicy p(Opts());
  EXPECT_EQ(p.NextStep(kStart), Step::kIdle);
  EXPECT_EQ(p.WindowLeft(kStart), absl::ZeroDuration());
}

TEST(SessionPolicyTest, OpenFailureExitStatuses) {
  EXPECT_EQ(SessionPolicy::OpenFailureExitStatus(absl::StatusCode::kDeadlineExceeded), 69);
  EXPECT_EQ(SessionPolicy::OpenFailureExitStatus(absl::StatusCode::kUnauthenticated), 77);
  EXPECT_EQ(SessionPolicy::OpenFailureExitStatus(absl::StatusCode::kUnavailable), 1);
}

}  // namespace
}  // namespace dgt::agent
