#include "agent/launch_options.h"

#include <cstring>

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

const char* NoEnv(const char*) { return nullptr; }
const char* FourGpus(const char* name) {
  return std::strcmp(name, "CUDA_VISIBLE_DEVICES") == 0 ? "0,1,2,3" : nullptr;
}

// This test's own source file serves as an existing "script".
const std::string kScript = __FILE__;

ParsedCommandLine Parse(std::vector<std::string> args, const char* (*env)(const char*) = NoEnv) {
  return ParseDgtRunCommandLine(args, env);
}

TEST(LaunchOptionsTest, TorchrunStyleMultiNode) {
  auto p = Parse({"--nnodes=2:4", "--nproc_per_node=8", "--rdzv-endpoint=10.0.0.1:29400",
                  "--rdzv_id=job", "--max-restarts", "3", kScript, "--lr", "0.1", "--nnodes=9"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.nproc_per_node, 8);
  EXPECT_EQ(o.rdzv_endpoint, "10.0.0.1:29400");
  EXPECT_EQ(o.run_id, "job");
  EXPECT_EQ(o.max_restarts, 3);
  // Everything after the script belongs to the script.
  EXPECT_EQ(o.command, (std::vector<std::string>{kScript, "--lr", "0.1", "--nnodes=9"}));
}

TEST(LaunchOptionsTest, StandaloneDefaults) {
  auto p = Parse({"--standalone", "--nproc-per-node=4", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_TRUE(p.options->standalone);
  EXPECT_EQ(p.options->min_nodes, 1);
  EXPECT_EQ(p.options->max_nodes, 1);
  EXPECT_EQ(p.options->python, "python3");
  EXPECT_EQ(p.options->join_timeout_s, 600);
}

TEST(LaunchOptionsTest, RdzvConfTimeouts) {
  auto p = Parse({"--nnodes=1", "--rdzv-conf=join_timeout=5,last_call_timeout=2,is_host=1",
                  kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->join_timeout_s, 5);
  EXPECT_EQ(p.options->last_call_timeout_s, 2);
}

TEST(LaunchOptionsTest, NprocGpuCountsVisibleDevices) {
  auto p = Parse({"--nproc-per-node=gpu", kScript}, FourGpus);
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->nproc_per_node, 4);
}

TEST(LaunchOptionsTest, NoPythonSkipsScriptCheck) {
  auto p = Parse({"--no-python", "/bin/true", "x"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_TRUE(p.options->no_python);
  EXPECT_EQ(p.options->command, (std::vector<std::string>{"/bin/true", "x"}));
}

struct BadCase {
  std::vector<std::string> args;
  std::string message;
};

TEST(LaunchOptionsTest, BadInputNamesTheProblem) {
  const BadCase cases[] = {
      {{"--nproc-per-node=0", kScript}, "dgt-run: error: --nproc-per-node must be >= 1, got 0\n"},
      {{"--nproc-per-node=lots", kScript},
       "dgt-run: error: --nproc-per-node must be an integer, auto, cpu or gpu, got 'lots'\n"},
      {{"--nnodes=3:2", kScript},
       "dgt-run: error: --nnodes must be N or MIN:MAX with 0 < MIN <= MAX, got '3:2'\n"},
      {{"--nnodes=0", kScript},
       "dgt-run: error: --nnodes must be N or MIN:MAX with 0 < MIN <= MAX, got '0'\n"},
      {{"--bogus", kScript}, "dgt-run: error: unknown flag '--bogus' (see dgt-run --help)\n"},
      {{"--nnodes=2", "--rdzv-endpoint=h:0", kScript},
       "dgt-run: error: --rdzv-endpoint: port must be 1..65535, got 'h:0'\n"},
      {{"--nnodes=2", kScript},
       "dgt-run: error: --rdzv-endpoint is required for --nnodes=2 (or use --standalone for one "
       "node)\n"},
      {{"--standalone", "no_such_script.py"},
       "dgt-run: error: training script 'no_such_script.py' does not exist\n"},
      {{"--standalone"},
       "dgt-run: error: missing the training script (usage: dgt-run [flags] script.py [script "
       "args])\n"},
      {{"--rdzv-backend=etcd", kScript},
       "dgt-run: error: --rdzv-backend=etcd is not supported: run dgt-rendezvous and pass its "
       "address with --rdzv-endpoint\n"},
      {{"--rdzv-conf=join_timeout=-1", kScript},
       "dgt-run: error: --rdzv-conf join_timeout must be a number of seconds > 0, got '-1'\n"},
      {{"--standalone", "--nnodes=2", kScript},
       "dgt-run: error: --standalone runs a single node, but --nnodes=2\n"},
  };
  for (const BadCase& c : cases) {
    auto p = Parse(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_EQ(p.output, c.message);
  }
}

TEST(LaunchOptionsTest, HelpExitsZero) {
  auto p = Parse({"--help"});
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_NE(p.output.find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(p.output.find("--rdzv-endpoint"), std::string::npos);
}

}  // namespace
}  // namespace dgt::agent
