// ExpandLogLinePrefix follows Python's string.Template.safe_substitute, which torchrun 2.13
// applies to TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; the expected values are what Python gives.
#include "agent/workers/log_line_prefix.h"

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

TEST(LogLinePrefixTest, SubstitutesTorchrunsThreeNames) {
  EXPECT_EQ(ExpandLogLinePrefix("[${rank}]:", "trainer", 5, 1), "[5]:");
  EXPECT_EQ(ExpandLogLinePrefix("[${role_name}${local_rank}]:", "trainer", 5, 1), "[trainer1]:");
  EXPECT_EQ(ExpandLogLinePrefix("$role_name/$rank/$local_rank ", "r", 12, 3), "r/12/3 ");
  EXPECT_EQ(ExpandLogLinePrefix("no placeholders", "r", 0, 0), "no placeholders");
}

TEST(LogLinePrefixTest, SafeSubstituteLeavesTheRestAsWritten) {
  EXPECT_EQ(ExpandLogLinePrefix("$$rank=$rank", "r", 7, 0), "$rank=7");  // "$$" is a '$'.
  EXPECT_EQ(ExpandLogLinePrefix("${RANK} $node ${node}", "r", 7, 0), "${RANK} $node ${node}");
  EXPECT_EQ(ExpandLogLinePrefix("$ ${ x $} $1 ${rank", "r", 7, 0), "$ ${ x $} $1 ${rank");
  EXPECT_EQ(ExpandLogLinePrefix("cost $", "r", 7, 0), "cost $");
  // "$rank_x" is the (unknown) name rank_x; "${rank}_x" is rank then "_x".
  EXPECT_EQ(ExpandLogLinePrefix("$rank_x ${rank}_x $rank-x", "r", 7, 0), "$rank_x 7_x 7-x");
}

TEST(LogLinePrefixTest, EmptyTemplateIsDgtsDefault) {
  EXPECT_EQ(LogLinePrefix("", "default", 3, 1), "[rank3]: ");
  EXPECT_EQ(LogLinePrefix("${rank}| ", "default", 3, 1), "3| ");
}

}  // namespace
}  // namespace dgt::agent
