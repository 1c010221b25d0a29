#include "replica/endpoint_log.h"

#include "gtest/gtest.h"

namespace dgt::replica {
namespace {

TEST(EndpointLogTest, OncePerEndpointPerChange) {
  EndpointLog log;
  EXPECT_EQ(log.Level("a:1", spdlog::level::warn, "a down"), spdlog::level::warn);
  EXPECT_EQ(log.Level("a:1", spdlog::level::warn, "a down"), spdlog::level::debug);
  EXPECT_EQ(log.Level("b:2", spdlog::level::warn, "a down"), spdlog::level::warn);  // Per endpoint.
  EXPECT_EQ(log.Level("a:1", spdlog::level::warn, "a refused"), spdlog::level::warn);
  EXPECT_EQ(log.Level("a:1", spdlog::level::info, "a down"), spdlog::level::info);
  EXPECT_EQ(log.Level("a:1", spdlog::level::info, "a down"), spdlog::level::debug);
}

TEST(EndpointLogTest, AStateMakesTheNextLineNewsAndClearForgetsAll) {
  EndpointLog log;
  EXPECT_FALSE(log.FailedBefore("a:1", "registered"));  // Nothing logged yet.
  log.Level("a:1", spdlog::level::warn, "a down");
  EXPECT_TRUE(log.FailedBefore("a:1", "registered"));
  log.Set("a:1", "registered");
  EXPECT_FALSE(log.FailedBefore("a:1", "registered"));
  EXPECT_EQ(log.Level("a:1", spdlog::level::warn, "a down"), spdlog::level::warn);
  log.Clear();
  EXPECT_FALSE(log.FailedBefore("a:1", "registered"));
  EXPECT_EQ(log.Level("a:1", spdlog::level::warn, "a down"), spdlog::level::warn);
}

}  // namespace
}  // namespace dgt::replica
