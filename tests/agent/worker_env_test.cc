#include "agent/workers/worker_env.h"

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
      {"CROSS_RANK", "1"},  // DeepSpeed's launcher names.
      {"CROSS_SIZE", "2"},
      {"LOCAL_SIZE", "2"},
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
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},  // The name torch < 2.2 (Debian's 1.13) reads.
  };
  EXPECT_EQ(env, expected);
}

// torchrun 2.13 --virtual-local-rank: LOCAL_RANK=0, the worker's own device only.
TEST(WorkerEnvTest, VirtualLocalRank) {
  NodeAssignment a;
  a.local_world_size = 3;
  a.world_size = 3;
  WorkerEnvExtras extras;
  extras.virtual_local_rank = true;
  extras.distribution = Distribution::kMpi;
  EnvMap env = BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "4, 6,7"}}, a, 1, extras);
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "6");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["OMPI_COMM_WORLD_LOCAL_RANK"], "1");  // The real local rank.
  EXPECT_EQ(env.count("TORCHELASTIC_SIGNALS_TO_HANDLE"), 0u);
  extras.signals_to_handle = "SIGTERM,SIGUSR1";
  EXPECT_EQ(BuildWorkerEnv({}, a, 0, extras)["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGUSR1");
  EXPECT_EQ(BuildWorkerEnv({}, a, 2, extras)["CUDA_VISIBLE_DEVICES"], "2");
  EXPECT_EQ(BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b"}}, a, 0, extras)
                .at("CUDA_VISIBLE_DEVICES"),
            "GPU-a");
  // Without the flag both are as the agent has them.
  EnvMap plain = BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "4,6,7"}}, a, 1);
  EXPECT_EQ(plain["LOCAL_RANK"], "1");
  EXPECT_EQ(plain["CUDA_VISIBLE_DEVICES"], "4,6,7");
}

TEST(WorkerEnvTest, AsyncErrorHandlingUnderEitherNameIsTheUsers) {
  NodeAssignment a;
  for (const char* name : {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"}) {
    EnvMap env = BuildWorkerEnv({{name, "0"}}, a, 0);
    EXPECT_EQ(env.at(name), "0") << name;
    EXPECT_EQ(env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") + env.count("NCCL_ASYNC_ERROR_HANDLING"),
              1u)
        << name;
  }
}

TEST(WorkerEnvTest, OmpDefaultOnlyWithSeveralWorkers) {
  NodeAssignment a;
  a.local_world_size = 1;
  EXPECT_EQ(BuildWorkerEnv({}, a, 0).count("OMP_NUM_THREADS"), 0u);
  a.local_world_size = 4;
  EXPECT_EQ(BuildWorkerEnv({}, a, 0).at("OMP_NUM_THREADS"), "1");
}

TEST(WorkerEnvTest, EnvStrings) {
  EXPECT_EQ(ToEnvStrings({{"A", "1"}, {"B", "x=y"}}), (std::vector<std::string>{"A=1", "B=x=y"}));
}

}  // namespace
}  // namespace dgt::agent

namespace dgt::agent {
namespace {

NodeAssignment OneNode(int nproc) {
  NodeAssignment a;
  a.run_id = "r";
  a.world_size = nproc;
  a.local_world_size = nproc;
  a.master_addr = "127.0.0.1";
  a.master_port = 4000;
  return a;
}

TEST(WorkerEnvTest, MpiDistribution) {
  WorkerEnvExtras x;
  x.distribution = Distribution::kMpi;
  x.role = "trainer";
  x.error_file = "/logs/r/attempt_0/2/error.json";
  EnvMap env = BuildWorkerEnv({}, OneNode(3), 2, x);
  EXPECT_EQ(env.at("OMPI_COMM_WORLD_RANK"), "2");
  EXPECT_EQ(env.at("OMPI_COMM_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("OMPI_COMM_WORLD_LOCAL_RANK"), "2");
  EXPECT_EQ(env.at("OMPI_COMM_WORLD_LOCAL_SIZE"), "3");
  EXPECT_EQ(env.at("AZ_BATCH_MASTER_NODE"), "127.0.0.1:4000");
  EXPECT_EQ(env.at("AZ_BATCHAI_MPI_MASTER_NODE"), "127.0.0.1");
  EXPECT_EQ(env.at("ROLE_NAME"), "trainer");
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/logs/r/attempt_0/2/error.json");
  EXPECT_EQ(env.count("TF_CONFIG"), 0u);
}

TEST(WorkerEnvTest, DeepSpeedLauncherNamesOverrideTheAgentsEnvironment) {
  NodeAssignment a;
  a.node_rank = 2;
  a.node_count = 3;
  a.local_world_size = 4;
  a.world_size = 12;
  a.first_global_rank = 8;
  const EnvMap stale = {{"CROSS_RANK", "0"}, {"CROSS_SIZE", "1"}, {"LOCAL_SIZE", "8"}};
  for (Distribution d : {Distribution::kPytorch, Distribution::kMpi, Distribution::kTensorflow}) {
    WorkerEnvExtras x;
    x.distribution = d;
    EnvMap env = BuildWorkerEnv(stale, a, 3, x);
    EXPECT_EQ(env.at("CROSS_RANK"), "2") << static_cast<int>(d);
    EXPECT_EQ(env.at("CROSS_SIZE"), "3") << static_cast<int>(d);
    EXPECT_EQ(env.at("LOCAL_SIZE"), "4") << static_cast<int>(d);
  }
}

TEST(WorkerEnvTest, PytorchHasNoOtherDistributionVariables) {
  EnvMap env = BuildWorkerEnv({}, OneNode(2), 0, {});
  EXPECT_EQ(env.count("OMPI_COMM_WORLD_RANK"), 0u);
  EXPECT_EQ(env.count("AZ_BATCH_MASTER_NODE"), 0u);
  EXPECT_EQ(env.count("AZ_BATCHAI_MPI_MASTER_NODE"), 0u);
  EXPECT_EQ(env.count("TF_CONFIG"), 0u);
  EXPECT_EQ(env.count("TORCHELASTIC_ERROR_FILE"), 0u);
}

TEST(WorkerEnvTest, TfConfigWithPsAndChief) {
  const std::vector<std::string> hosts = {"h:1", "h:2", "h:3", "h:4"};
  EXPECT_EQ(BuildTfConfig(hosts, 1, true, 0),
            R"({"cluster":{"ps":["h:1"],"chief":["h:2"],"worker":["h:3","h:4"]},)"
            R"("task":{"type":"ps","index":0},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(hosts, 1, true, 1),
            R"({"cluster":{"ps":["h:1"],"chief":["h:2"],"worker":["h:3","h:4"]},)"
            R"("task":{"type":"chief","index":0},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(hosts, 1, true, 3),
            R"({"cluster":{"ps":["h:1"],"chief":["h:2"],"worker":["h:3","h:4"]},)"
            R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig({"h:1", "h:2"}, 0, false, 1),
            R"({"cluster":{"worker":["h:1","h:2"]},"task":{"type":"worker","index":1},)"
            R"("environment":"cloud"})");
}

}  // namespace
}  // namespace dgt::agent
