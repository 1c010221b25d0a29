#include "agent/endpoint_rotation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::agent {
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

}  // namespace
}  // namespace dgt::agent
