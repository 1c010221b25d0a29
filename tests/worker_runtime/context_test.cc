#include "dgt/worker/context.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace dgt::worker {
namespace {

Context::Getenv EnvOf(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> Valid() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"NODE_RANK", "1"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "job"},
          {"TORCHELASTIC_RESTART_COUNT", "2"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
}

TEST(ContextTest, ParsesTheContract) {
  auto c = Context::FromEnv(EnvOf(Valid()));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->local_rank, 1);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->local_world_size, 2);
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->master_addr, "10.0.0.1");
  EXPECT_EQ(c->master_port, 29500);
  EXPECT_EQ(c->run_id, "job");
  EXPECT_EQ(c->generation, 2);
  EXPECT_TRUE(c->agent_store);
}

TEST(ContextTest, GroupRankStandsInForNodeRank) {
  auto vars = Valid();
  vars.erase("NODE_RANK");
  // A std::string, not "1": gcc 12 -O3 reports a false -Wrestrict (GCC bug 105329) for
  // std::string::operator=(const char*) here.
  vars["GROUP_RANK"] = std::string("1");
  EXPECT_EQ(Context::FromEnv(EnvOf(vars))->node_rank, 1);
}

TEST(ContextTest, ErrorsNameVariableAndValue) {
  struct Case {
    std::string var, value, message;
  };
  const Case cases[] = {
      {"RANK", "7", "RANK must be an integer in [0, WORLD_SIZE=4), got '7'"},
      {"RANK", "x", "RANK must be an integer in [0, WORLD_SIZE=4), got 'x'"},
      {"WORLD_SIZE", "0", "WORLD_SIZE must be an integer in [1, 2^30), got '0'"},
      {"LOCAL_RANK", "2", "LOCAL_RANK must be an integer in [0, LOCAL_WORLD_SIZE=2), got '2'"},
      {"MASTER_PORT", "70000", "MASTER_PORT must be an integer in [1, 65535], got '70000'"},
      {"MASTER_ADDR", "", "MASTER_ADDR is not set"},
  };
  for (const Case& c : cases) {
    auto vars = Valid();
    vars[c.var] = c.value;
    auto ctx = Context::FromEnv(EnvOf(vars));
    EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument) << c.var;
    EXPECT_EQ(ctx.status().message(), c.message);
  }
  auto missing = Valid();
  missing.erase("RANK");
  EXPECT_EQ(Context::FromEnv(EnvOf(missing)).status().message(), "RANK is not set");
}

}  // namespace
}  // namespace dgt::worker
