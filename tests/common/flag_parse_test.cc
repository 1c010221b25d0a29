#include "common/flag_parse.h"

#include <limits>

#include "gtest/gtest.h"

namespace dgt {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(FlagParseTest, DurationAcceptsSecondsInRange) {
  EXPECT_EQ(*ParseDuration("--t", "30", absl::ZeroDuration(), kMaxFlagDuration), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("--t", "1.5", absl::ZeroDuration(), kMaxFlagDuration),
            absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDuration("--t", "2e3", absl::ZeroDuration(), kMaxFlagDuration),
            absl::Seconds(2000));
  EXPECT_EQ(*ParseDuration("--t", "0", absl::ZeroDuration(), kMaxFlagDuration),
            absl::ZeroDuration());
  // Both bounds are inclusive.
  EXPECT_EQ(*ParseDuration("--t", "31536000", absl::ZeroDuration(), kMaxFlagDuration),
            kMaxFlagDuration);
  EXPECT_EQ(*ParseDuration("--t", "0.001", kMinPositiveFlagDuration, kMaxFlagDuration),
            absl::Milliseconds(1));
}

TEST(FlagParseTest, DurationRefusesNanInfNegativeOverflowAndText) {
  const std::string bound = "from 0.001 to 31536000 (a year)";
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "-1", "0", "0.0005", "1e18", "1e20", "1e300",
                          "31536000.5", "", "5s", "abc", "1,5", "0x10", "0x1p-3", "0X1"}) {
    auto d = ParseDuration("--timeout", bad, kMinPositiveFlagDuration, kMaxFlagDuration);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(),
              "--timeout must be a number of seconds " + bound + ", got '" + bad + "'");
  }
  EXPECT_EQ(ParseDuration("--idle-timeout", "nan", absl::ZeroDuration(), kMaxFlagDuration)
                .status()
                .message(),
            "--idle-timeout must be a number of seconds from 0 to 31536000 (a year), got 'nan'");
  EXPECT_EQ(
      ParseDuration("--x", "3", absl::Milliseconds(1500), absl::Seconds(2)).status().message(),
      "--x must be a number of seconds from 1.5 to 2, got '3'");
}

TEST(FlagParseTest, Int64AcceptsIntegersInRange) {
  EXPECT_EQ(*ParseInt64("--n", "0", 0, 10), 0);
  EXPECT_EQ(*ParseInt64("--n", "10", 0, 10), 10);
  EXPECT_EQ(*ParseInt64("--n", "-5", -5, 10), -5);
  EXPECT_EQ(*ParseInt64("--n", "9223372036854775807", kMin, kMax), kMax);
  EXPECT_EQ(*ParseInt64("--n", "-9223372036854775808", kMin, kMax), kMin);
}

TEST(FlagParseTest, Int64RefusesOverflowFractionsAndOutOfRange) {
  for (const char* bad : {"-5", "11", "1.5", "abc", "", "1e3", "99999999999999999999", "nan"}) {
    auto n = ParseInt64("--node-rank", bad, 0, 10);
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(n.status().message(),
              std::string("--node-rank must be an integer from 0 to 10, got '") + bad + "'");
  }
  EXPECT_EQ(ParseInt64("--max-value-bytes", "-5", 1, kMax).status().message(),
            "--max-value-bytes must be an integer >= 1, got '-5'");
  EXPECT_EQ(ParseInt64("delta", "99999999999999999999", kMin, kMax).status().message(),
            "delta must be a 64-bit signed integer, got '99999999999999999999'");
  EXPECT_EQ(ParseInt64("delta", "-99999999999999999999", kMin, kMax).status().message(),
            "delta must be a 64-bit signed integer, got '-99999999999999999999'");
}

TEST(FlagParseTest, FormatFlagSeconds) {
  EXPECT_EQ(FormatFlagSeconds(absl::Seconds(30)), "30");
  EXPECT_EQ(FormatFlagSeconds(absl::ZeroDuration()), "0");
  EXPECT_EQ(FormatFlagSeconds(absl::Milliseconds(1)), "0.001");
  EXPECT_EQ(FormatFlagSeconds(absl::Milliseconds(2500)), "2.5");
  EXPECT_EQ(FormatFlagSeconds(kMaxFlagDuration), "31536000 (a year)");
}

}  // namespace
}  // namespace dgt
