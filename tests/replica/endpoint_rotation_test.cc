#include "replica/endpoint_rotation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::replica {
namespace {

double Full() { return 1.0; }

TEST(EndpointRotationTest, OneEndpointBacksOffExponentiallyToFiveSeconds) {
  EndpointRotation r({"a:1"}, Full);
  EXPECT_FALSE(r.several());
  EXPECT_EQ(r.OnLost(), absl::Milliseconds(100));
  EXPECT_EQ(r.current(), "a:1");
  std::vector<absl::Duration> pauses;
  for (int i = 0; i < 8; ++i) pauses.push_back(r.OnAttemptFailed());
  EXPECT_EQ(pauses, (std::vector<absl::Duration>{absl::Milliseconds(200), absl::Milliseconds(400),
                                                 absl::Milliseconds(800), absl::Milliseconds(1600),
                                                 absl::Milliseconds(3200), absl::Seconds(5),
                                                 absl::Seconds(5), absl::Seconds(5)}));
  EXPECT_EQ(r.current(), "a:1");
  // Accepted, then lost again: the backoff starts over.
  r.OnAccepted();
  EXPECT_EQ(r.OnLost(), absl::Milliseconds(100));
}

TEST(EndpointRotationTest, SeveralMoveOnAtOnceAndPauseAfterAFullPass) {
  EndpointRotation r({"a:1", "b:2", "c:3"}, Full);
  EXPECT_TRUE(r.several());
  EXPECT_EQ(r.current(), "a:1");
  // a refused, b a standby: the next one at once.
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.current(), "b:2");
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.current(), "c:3");
  // c fails too: a full pass, then a pause (100 ms, then 200 ms at most).
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(100));
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(200));
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
    EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
    EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(200));
  }
  EXPECT_EQ(r.current(), "a:1");
}

TEST(EndpointRotationTest, LostSessionGoesToTheNextReplicaFirstAndTheLostOneLast) {
  EndpointRotation r({"a:1", "b:2", "c:3"}, Full);
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());  // a down at the start.
  r.OnAccepted();                                        // b took the session.
  EXPECT_EQ(r.current(), "b:2");
  EXPECT_EQ(r.OnLost(), absl::ZeroDuration());  // b died: c at once.
  EXPECT_EQ(r.current(), "c:3");
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_EQ(r.OnAttemptFailed(), absl::ZeroDuration());
  EXPECT_EQ(r.current(), "b:2");  // The lost one, last in the pass.
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(100));
  EXPECT_EQ(r.current(), "c:3");
}

TEST(EndpointRotationTest, JitterScalesEachPauseWithinHalfToAll) {
  double factor = 0.5;
  EndpointRotation one({"a:1"}, [&] { return factor; });
  EXPECT_EQ(one.OnLost(), absl::Milliseconds(50));
  factor = 7;  // Out of range: clamped.
  EXPECT_EQ(one.OnAttemptFailed(), absl::Milliseconds(200));
  EndpointRotation several({"a:1", "b:2"});  // The random default stays in range.
  for (int i = 0; i < 20; ++i) {
    several.OnAttemptFailed();
    const absl::Duration pause = several.OnAttemptFailed();
    EXPECT_GE(pause, absl::Milliseconds(50));
    EXPECT_LE(pause, absl::Milliseconds(200));
  }
}

// dgt-agent's registration: a pause after every failed attempt, 200 ms doubling to its
// max_backoff, no jitter.
RotationOptions EveryAttempt() {
  RotationOptions options;
  options.first_pause = absl::Milliseconds(200);
  options.max_pause_one = absl::Milliseconds(800);
  options.max_pause_several = absl::Milliseconds(800);
  options.pause_per_pass = false;
  options.jitter = Full;
  return options;
}

TEST(EndpointRotationTest, PausePerAttemptMovesOnAndBacksOffEachTime) {
  EndpointRotation r({"a:1", "b:2"}, EveryAttempt());
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(200));
  EXPECT_EQ(r.current(), "b:2");
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(400));
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(800));
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(800));
  EXPECT_EQ(r.current(), "a:1");
  r.OnAccepted();
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(200));
}

TEST(EndpointRotationTest, ARefusalStaysAndBacksOff) {
  EndpointRotation r({"a:1", "b:2"}, EveryAttempt());
  EXPECT_EQ(r.OnRefused(), absl::Milliseconds(200));
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_EQ(r.OnRefused(), absl::Milliseconds(400));
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(800));
  EXPECT_EQ(r.current(), "b:2");
}

TEST(EndpointRotationTest, LeaderRedirectMovesToTheLeaderAndTheBackoffGoesOn) {
  EndpointRotation r({"a:1", "b:2", "c:3"}, EveryAttempt());
  // a is a standby naming c: c next, after the backoff step.
  EXPECT_EQ(r.OnRefused(), absl::Milliseconds(200));
  r.MoveTo(2);
  EXPECT_EQ(r.current(), "c:3");
  EXPECT_EQ(r.index(), 2u);
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(400));
  EXPECT_EQ(r.current(), "a:1");  // c failed: the rotation goes on after it.
  r.MoveTo(4);                    // Modulo the list.
  EXPECT_EQ(r.current(), "b:2");
}

TEST(EndpointRotationTest, SetEndpointsStartsAtTheFirstAndKeepsTheBackoff) {
  EndpointRotation r({"a:1", "b:2"}, EveryAttempt());
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(200));
  EXPECT_EQ(r.current(), "b:2");
  r.SetEndpoints({"x:1", "y:2", "z:3"});
  EXPECT_EQ(r.current(), "x:1");
  EXPECT_EQ(r.endpoints(), (std::vector<std::string>{"x:1", "y:2", "z:3"}));
  EXPECT_EQ(r.OnAttemptFailed(), absl::Milliseconds(400));
  EXPECT_EQ(r.current(), "y:2");
  r.SetEndpoints({});
  EXPECT_EQ(r.current(), "");
  EXPECT_FALSE(r.several());
}

}  // namespace
}  // namespace dgt::replica
