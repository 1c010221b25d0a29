// The pure decisions of node health checks (agent/health/health_policy.h) on a simulated clock.
#include "agent/health/health_policy.h"

#include <string>

#include "agent/exit_codes.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// docs/EXIT_CODES.md: the value schedulers match on.
TEST(HealthExitCodeTest, Is71) { EXPECT_EQ(kExitNodeUnhealthy, 71); }

TEST(OutputTailTest, KeepsEverythingBelowTheCap) {
  OutputTail tail(8);
  tail.Append("abc");
  tail.Append("def\n");
  EXPECT_EQ(tail.total(), 7u);
  EXPECT_FALSE(tail.cut());
  EXPECT_EQ(tail.Text(), "abcdef");
}

TEST(OutputTailTest, KeepsTheLastBytesAndSaysItCut) {
  OutputTail tail(8);
  tail.Append("0123456");
  tail.Append("789ab");  // Wraps around.
  EXPECT_EQ(tail.total(), 12u);
  EXPECT_TRUE(tail.cut());
  EXPECT_EQ(tail.Text(), "[output cut: the last 8 of 12 bytes] 456789ab");
  tail.Append("cdefghijklmnop");  // Longer than the cap at once.
  EXPECT_EQ(tail.Text(), "[output cut: the last 8 of 26 bytes] ijklmnop");
}

TEST(OutputTailTest, ControlBytesAreEscapedNotCutOrPrinted) {
  OutputTail tail;
  tail.Append(std::string_view("a\0b\x01\xff\x1b[31mRED\tx\ny\x7f\n", 19));
  EXPECT_EQ(tail.Text(), "a\\x00b\\x01\\xff\\x1b[31mRED\tx\ny\\x7f");
}

// A protobuf string field must be UTF-8: a reason that is not cannot be sent to the service.
TEST(OutputTailTest, BytesThatAreNotUtf8AreEscapedAndCharactersKept) {
  OutputTail tail(5);
  // "€€" is E2 82 AC E2 82 AC: the last 5 bytes begin inside the first euro sign.
  tail.Append("\xe2\x82\xac\xe2\x82\xac");
  EXPECT_EQ(tail.Text(), "[output cut: the last 5 of 6 bytes] \\x82\\xac\xe2\x82\xac");
  OutputTail latin1;
  // Latin-1 "café", an overlong '/', a UTF-16 surrogate, then a 4-byte emoji.
  latin1.Append("caf\xe9 \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98\x80");
  EXPECT_EQ(latin1.Text(), "caf\\xe9 \\xc0\\xaf \\xed\\xa0\\x80 \xf0\x9f\x98\x80");
}

TEST(OneLineReasonTest, OneLineOfUtf8CutAtACharacter) {
  EXPECT_EQ(OneLineReason("check 'x' failed:\nn9 FORGED\tline"),
            "check 'x' failed:\\x0an9 FORGED\\x09line");
  EXPECT_EQ(OneLineReason("caf\xe9"), "caf\\xe9");
  // 10 bytes at most: "ab" then a euro sign (3) fits in 5, a second in 8, the third not.
  EXPECT_EQ(OneLineReason("ab\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", 10),
            "ab\xe2\x82\xac\xe2\x82\xac...");
  EXPECT_EQ(OneLineReason(std::string(5000, 'a')).size(), kHealthReasonCap + 3);
  EXPECT_EQ(OneLineReason(""), "");
}

TEST(OutputTailTest, OneMegabyteInSmallPiecesKeepsTheDefaultCap) {
  OutputTail tail;
  const std::string line = "0123456789abcde\n";  // 16 bytes.
  for (int i = 0; i < 65536; ++i) tail.Append(line);
  EXPECT_EQ(tail.total(), 1048576u);
  const std::string text = tail.Text();
  const std::string prefix = "[output cut: the last 4096 of 1048576 bytes] ";
  ASSERT_EQ(text.substr(0, prefix.size()), prefix);
  // 256 lines kept, the last newline stripped.
  EXPECT_EQ(text.size(), prefix.size() + 4095);
  EXPECT_EQ(text.substr(text.size() - 15), "0123456789abcde");
}

TEST(CommandVerdictTest, ExitZeroIsHealthy) {
  CommandEnd end;
  end.output = "all good";
  const HealthResult r = CommandVerdict(end, absl::Seconds(60));
  EXPECT_TRUE(r.healthy);
  EXPECT_EQ(r.reason, "all good");
}

TEST(CommandVerdictTest, EveryOtherEndIsUnhealthyWithTheOutput) {
  CommandEnd code;
  code.exit_code = 3;
  code.output = "GPU 2 fell off the bus";
  EXPECT_EQ(CommandVerdict(code, absl::Seconds(60)).reason,
            "exited with code 3: GPU 2 fell off the bus");
  EXPECT_FALSE(CommandVerdict(code, absl::Seconds(60)).healthy);
  CommandEnd signalled;
  signalled.signal = 11;
  EXPECT_EQ(CommandVerdict(signalled, absl::Seconds(60)).reason, "killed by SIGSEGV: (no output)");
  CommandEnd hung;
  hung.timed_out = true;
  hung.output = "checking";
  EXPECT_EQ(CommandVerdict(hung, absl::Milliseconds(1500)).reason,
            "did not finish within 1.5 s (--health-check-timeout); killed: checking");
}

TEST(RoundVerdictTest, TheFirstFailureNamesItsCheck) {
  EXPECT_EQ(RoundVerdict({}), std::nullopt);
  EXPECT_EQ(RoundVerdict({{"shm", {true, ""}}, {"gpu-count", {true, "8 GPU(s)"}}}), std::nullopt);
  EXPECT_EQ(RoundVerdict({{"shm", {true, ""}},
                          {"check.sh", {false, "exited with code 1: bad"}},
                          {"gpu-count", {false, "found 7"}}}),
            "health check 'check.sh' failed: exited with code 1: bad");
}

TEST(HealthScheduleTest, RoundsEveryIntervalFromTheirStart) {
  HealthSchedule s(absl::Seconds(10));
  EXPECT_TRUE(s.periodic());
  EXPECT_EQ(s.NextRun(), std::nullopt);  // Before the first round.
  s.Started(kT0);
  EXPECT_TRUE(s.running());
  EXPECT_EQ(s.NextRun(), std::nullopt);  // Never two at once.
  s.Finished(kT0 + absl::Seconds(2));
  EXPECT_EQ(s.NextRun(), kT0 + absl::Seconds(10));
  EXPECT_FALSE(s.Due(kT0 + absl::Seconds(9)));
  EXPECT_TRUE(s.Due(kT0 + absl::Seconds(10)));
}

TEST(HealthScheduleTest, ARoundLongerThanTheIntervalIsFollowedAtItsEnd) {
  HealthSchedule s(absl::Seconds(10));
  s.Started(kT0);
  s.Finished(kT0 + absl::Seconds(25));
  EXPECT_EQ(s.NextRun(), kT0 + absl::Seconds(25));
  EXPECT_TRUE(s.Due(kT0 + absl::Seconds(25)));
}

TEST(HealthScheduleTest, IntervalZeroHasNoRoundAfterTheFirst) {
  HealthSchedule s(absl::ZeroDuration());
  EXPECT_FALSE(s.periodic());
  s.Started(kT0);
  s.Finished(kT0 + absl::Seconds(1));
  EXPECT_EQ(s.NextRun(), std::nullopt);
  EXPECT_FALSE(s.Due(kT0 + absl::Hours(1)));
}

}  // namespace
}  // namespace dgt::agent
