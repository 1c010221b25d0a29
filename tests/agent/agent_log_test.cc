#include "agent/agent_log.h"

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

TEST(AgentLogTest, JsonLineEscapesTheMessage) {
  EXPECT_EQ(JsonLogLine("2026-01-02T03:04:05.678Z", "error", "a \"b\"\n\tc"),
            R"({"time":"2026-01-02T03:04:05.678Z","level":"error","msg":"a \"b\"\n\tc"})");
  // Invalid UTF-8 from a worker's output does not break the line.
  EXPECT_EQ(JsonLogLine("t", "info", "x\xff"),
            "{\"time\":\"t\",\"level\":\"info\",\"msg\":\"x\xef\xbf\xbd\"}");
}

}  // namespace
}  // namespace dgt::agent
