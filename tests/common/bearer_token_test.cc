// The bearer token's wire form (common/bearer_token.h): the value a client sends, and the match a
// server makes, which takes the whole value and nothing else.
#include "common/bearer_token.h"

#include <gtest/gtest.h>

namespace dgt {
namespace {

TEST(BearerTokenTest, ValueAndMatching) {
  EXPECT_EQ(BearerValue("abc"), "Bearer abc");
  EXPECT_TRUE(TokenMatches("Bearer abc", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abd", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer ab", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(TokenMatches("abc", "abc"));
}

}  // namespace
}  // namespace dgt
