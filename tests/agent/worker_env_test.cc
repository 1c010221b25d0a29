#include "agent/worker_env.h"

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

TEST(WorkerEnvTest, ContractForSecondNode) {
  NodeAssignment a;
  a.run_id = "job";
  a.node_rank = 1;
  a.node_count = 2;
  a.world_size = 4;
  a.first_global_rank = 2;
  a.local_world_size = 2;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.restart_count = 0;
  a.max_restarts = 3;
  EnvMap base = {{"PATH", "/usr/bin"}, {"RANK", "stale"}, {"OMP_NUM_THREADS", "8"}};
  EnvMap env = BuildWorkerEnv(base, a, 1);
  const EnvMap expected = {
      {"PATH", "/usr/bin"},
      {"RANK", "3"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"NODE_RANK", "1"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", "3"},
      {"ROLE_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"OMP_NUM_THREADS", "8"},  // Kept: the user set it.
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
  };
  EXPECT_EQ(env, expected);
}

TEST(WorkerEnvTest, OmpDefaultOnlyWithSeveralWorkers) {
  NodeAssignment a;
  a.local_world_size = 1;
  EXPECT_EQ(BuildWorkerEnv({}, a, 0).count("OMP_NUM_THREADS"), 0u);
  a.local_world_size = 4;
  EXPECT_EQ(BuildWorkerEnv({}, a, 0).at("OMP_NUM_THREADS"), "1");
}

TEST(WorkerEnvTest, EnvStrings) {
  EXPECT_EQ(ToEnvStrings({{"A", "1"}, {"B", "x=y"}}),
            (std::vector<std::string>{"A=1", "B=x=y"}));
}

}  // namespace
}  // namespace dgt::agent
