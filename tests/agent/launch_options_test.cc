#include "agent/launch_options.h"

#include <signal.h>

#include <cstring>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

const char* NoEnv(const char*) { return nullptr; }
const char* FourGpus(const char* name) {
  return std::strcmp(name, "CUDA_VISIBLE_DEVICES") == 0 ? "0,1,2,3" : nullptr;
}

// An existing "script" (the tests run from any working directory).
std::string MakeScript() {
  std::string path = ::testing::TempDir() + "dgt_launch_options_test_script.py";
  std::ofstream(path) << "print('hi')\n";
  return path;
}
const std::string kScript = MakeScript();

ParsedCommandLine Parse(const std::vector<std::string>& args,
                        const char* (*env)(const char*) = NoEnv) {
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
  auto p =
      Parse({"--nnodes=1", "--rdzv-conf=join_timeout=5,last_call_timeout=2,is_host=1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->join_timeout_s, 5);
  EXPECT_EQ(p.options->last_call_timeout_s, 2);
  EXPECT_EQ(p.options->rdzv_is_host, std::optional<bool>(true));
}

TEST(LaunchOptionsTest, RdzvConfIsHost) {
  auto unset = Parse({"--nnodes=1", kScript});
  ASSERT_TRUE(unset.options.has_value()) << unset.output;
  EXPECT_EQ(unset.options->rdzv_is_host, std::nullopt);
  auto off = Parse({"--nnodes=1", "--rdzv-conf=is_host=False", kScript});
  ASSERT_TRUE(off.options.has_value()) << off.output;
  EXPECT_EQ(off.options->rdzv_is_host, std::optional<bool>(false));
  // Every spelling torch's get_as_bool takes, in any case.
  for (const char* yes : {"1", "true", "TRUE", "t", "Yes", "y"}) {
    auto p = Parse({"--nnodes=1", absl::StrCat("--rdzv-conf=is_host=", yes), kScript});
    ASSERT_TRUE(p.options.has_value()) << yes << ": " << p.output;
    EXPECT_EQ(p.options->rdzv_is_host, std::optional<bool>(true)) << yes;
  }
  for (const char* no : {"0", "false", "F", "no", "N"}) {
    auto p = Parse({"--nnodes=1", absl::StrCat("--rdzv-conf=is_host=", no), kScript});
    ASSERT_TRUE(p.options.has_value()) << no << ": " << p.output;
    EXPECT_EQ(p.options->rdzv_is_host, std::optional<bool>(false)) << no;
  }
}

TEST(LaunchOptionsTest, RdzvConfAcceptsTorchrunCompatibilityKeys) {
  auto p = Parse({"--nnodes=1",
                  "--rdzv-conf=close_timeout=10,read_timeout=60,keep_alive_interval=5,"
                  "keep_alive_max_attempt=3,timeout=900",
                  kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->join_timeout_s, 900);
}

TEST(LaunchOptionsTest, ReadTimeoutBoundsReconnectingToALostService) {
  auto defaults = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", kScript});
  ASSERT_TRUE(defaults.options.has_value()) << defaults.output;
  EXPECT_EQ(defaults.options->reconnect_timeout_s, 60);
  auto p = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", "--rdzv-conf=read_timeout=7.5", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->reconnect_timeout_s, 7.5);
}

TEST(LaunchOptionsTest, HelpListsRdzvConfKeys) {
  auto p = Parse({"--help"});
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_NE(p.output.find("join_timeout, last_call_timeout (seconds), is_host"), std::string::npos)
      << p.output;
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
      {{"--recovery-mode=shrink", kScript},
       "dgt-run: error: --recovery-mode=shrink needs --restart-policy=rank\n"},
      {{"--restart-policy=rank", "--recovery-mode=grow", kScript},
       "dgt-run: error: --recovery-mode must be replace or shrink, got 'grow'\n"},
      {{"--rdzv-endpoint=", "--rdzv-id=x", kScript},
       "dgt-run: error: --rdzv-endpoint needs a value, got an empty one\n"},
      {{"--nproc-per-node=", kScript},
       "dgt-run: error: --nproc-per-node needs a value, got an empty one\n"},
      {{"--standalone", "/tmp"}, "dgt-run: error: training script '/tmp' is a directory\n"},
      {{"--nnodes=2", "--rdzv-endpoint=h:0", kScript},
       "dgt-run: error: --rdzv-endpoint: port must be 1..65535, got 'h:0'\n"},
      {{"--rdzv-backend=c10d", "--nnodes=2", kScript},
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
      {{"--rdzv-conf=is_host=maybe", kScript},
       "dgt-run: error: --rdzv-conf is_host must be true or false (1/0, t/f, yes/no, y/n; any "
       "case), got 'maybe'\n"},
      {{"--rdzv-conf=join_timout=5", kScript},
       "dgt-run: error: --rdzv-conf: unknown key 'join_timout' (known: join_timeout, "
       "last_call_timeout, close_timeout, read_timeout, timeout, keep_alive_interval, "
       "keep_alive_max_attempt, is_host)\n"},
      {{"--rdzv-conf=keep_alive_max_attempt=0", kScript},
       "dgt-run: error: --rdzv-conf keep_alive_max_attempt must be an integer >= 1, got '0'\n"},
      {{"--rdzv-conf=keep_alive_interval=x", kScript},
       "dgt-run: error: --rdzv-conf keep_alive_interval must be a number of seconds > 0 and <= "
       "31536000, got "
       "'x'\n"},
      {{"--rdzv-conf=join_timeout=-1", kScript},
       "dgt-run: error: --rdzv-conf join_timeout must be a number of seconds > 0 and <= 31536000, "
       "got '-1'\n"},
      {{"--standalone", "--nnodes=2", kScript},
       "dgt-run: error: --standalone runs a single node, but --nnodes=2\n"},
      {{"-r", "4", kScript},
       "dgt-run: error: --redirects must be 0..3 or LOCAL_RANK:0..3,..., "
       "got '4'\n"},
      {{"--tee", "0:x", kScript},
       "dgt-run: error: --tee must be 0..3 or LOCAL_RANK:0..3,..., got '0:x'\n"},
      {{"--local-ranks-filter=a", kScript},
       "dgt-run: error: --local-ranks-filter must be local ranks like 0,2, got 'a'\n"},
      {{"--log-format=xml", kScript},
       "dgt-run: error: --log-format must be text or json, got 'xml'\n"},
      {{"--distribution=horovod", kScript},
       "dgt-run: error: --distribution must be pytorch, tensorflow or mpi, got 'horovod'\n"},
      {{"--restart-policy=node", kScript},
       "dgt-run: error: --restart-policy must be group or rank, got 'node'\n"},
      {{"--signals-to-handle=SIGNOPE", kScript},
       "dgt-run: error: --signals-to-handle: 'SIGNOPE' is not a signal that can be handled\n"},
      {{"--master-port=0", kScript}, "dgt-run: error: --master-port must be 1..65535, got 0\n"},
      {{"--rdzv-backend=static", "--nnodes=1:2", kScript},
       "dgt-run: error: --rdzv-backend=static needs a fixed --nnodes, got '1:2' (use "
       "--rdzv-endpoint of dgt-rendezvous for elastic jobs)\n"},
      {{"--nnodes=2", "--node-rank=2", kScript},
       "dgt-run: error: --node-rank must be 0..1 for --nnodes=2, got 2\n"},
      {{"--distribution=tensorflow", "--worker-count=2", "--nproc-per-node=4", kScript},
       "dgt-run: error: --worker-count=2 + --parameter-server-count=0 must equal the number of "
       "processes, 4\n"},
      {{"-m", "--no-python", "x"},
       "dgt-run: error: -m/--module and --no-python exclude each other\n"},
  };
  for (const BadCase& c : cases) {
    auto p = Parse(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_EQ(p.output, c.message);
  }
}

const char* PetEnv(const char* name) {
  static const std::map<std::string, std::string> env = {
      {"PET_NPROC_PER_NODE", "3"},  {"PET_NNODES", "2:3"},
      {"PET_RDZV_ENDPOINT", "h:1"}, {"PET_MAX_RESTARTS", "4"},
      {"PET_RDZV_ID", "from-env"},  {"PET_STANDALONE", ""},
      {"PET_LOG_DIR", "/tmp/logs"}, {"PET_REDIRECTS", "3"},
      {"PET_MASTER_PORT", "1234"},  {"PET_SIGNALS_TO_HANDLE", "SIGTERM,USR1"},
      {"PET_NO_PYTHON", "1"},
  };
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

TEST(LaunchOptionsTest, PetEnvironmentDefaults) {
  auto p = Parse({"/bin/true"}, PetEnv);
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.rdzv_endpoint, "h:1");
  EXPECT_EQ(o.max_restarts, 4);
  EXPECT_EQ(o.run_id, "from-env");
  EXPECT_FALSE(o.standalone);
  EXPECT_EQ(o.log_dir, "/tmp/logs");
  EXPECT_EQ(o.redirects.all, 3);
  EXPECT_TRUE(o.master_port_set);
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.signals_to_handle, (std::vector<int>{SIGTERM, SIGUSR1}));
  EXPECT_TRUE(o.no_python);
  // The command line wins over PET_*.
  auto q = Parse({"--nproc_per_node=5", "--process-count-per-instance=6", "/bin/true"}, PetEnv);
  ASSERT_TRUE(q.options.has_value()) << q.output;
  EXPECT_EQ(q.options->nproc_per_node, 6);
  auto r = Parse({"--instance-count=4", "/bin/true"}, PetEnv);
  ASSERT_TRUE(r.options.has_value()) << r.output;
  EXPECT_EQ(r.options->min_nodes, 4);
  EXPECT_EQ(r.options->max_nodes, 4);
}

TEST(LaunchOptionsTest, FullTorchrunFlagSet) {
  auto p = Parse({"--nnodes",
                  "1",
                  "--nproc_per_node",
                  "2",
                  "--rdzv_backend",
                  "c10d",
                  "--rdzv_endpoint",
                  "localhost:29400",
                  "--rdzv_id",
                  "x",
                  "--rdzv_conf",
                  "read_timeout=60,close_timeout=5",
                  "--max_restarts",
                  "1",
                  "--monitor_interval",
                  "5",
                  "--start_method",
                  "fork",
                  "--role",
                  "trainer",
                  "--run_path",
                  "--log_dir",
                  "/tmp/l",
                  "-r",
                  "0:1,1:2",
                  "-t",
                  "3",
                  "--local_ranks_filter",
                  "0,1",
                  "--node_rank",
                  "0",
                  "--master_addr",
                  "10.1.1.1",
                  "--master_port",
                  "29501",
                  "--local_addr",
                  "127.0.0.1",
                  "--signals_to_handle",
                  "SIGTERM,SIGINT",
                  "--stop_timeout",
                  "7",
                  "--log_format",
                  "json",
                  "--restart_policy",
                  "rank",
                  "--pass_local_rank_arg",
                  kScript,
                  "a"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.rdzv_backend, "c10d");
  EXPECT_EQ(o.monitor_interval_s, 5);
  EXPECT_EQ(o.start_method, "fork");
  EXPECT_EQ(o.role, "trainer");
  EXPECT_TRUE(o.run_path);
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_EQ(o.redirects.For(0), 1);
  EXPECT_EQ(o.redirects.For(1), 2);
  EXPECT_EQ(o.redirects.For(2), 0);
  EXPECT_EQ(o.tee.For(5), 3);
  EXPECT_EQ(o.local_ranks_filter, (std::set<int>{0, 1}));
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "10.1.1.1");
  EXPECT_EQ(o.master_port, 29501);
  EXPECT_EQ(o.local_addr, "127.0.0.1");
  EXPECT_EQ(o.signals_to_handle, (std::vector<int>{SIGTERM, SIGINT}));
  EXPECT_EQ(o.stop_timeout_s, 7);
  EXPECT_EQ(o.log_format, LogFormat::kJson);
  EXPECT_EQ(o.restart_policy, RestartPolicy::kRank);
  EXPECT_TRUE(o.pass_local_rank_arg);
  EXPECT_EQ(o.command, (std::vector<std::string>{kScript, "a"}));
}

TEST(LaunchOptionsTest, Defaults) {
  auto p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.rdzv_backend, "static");
  EXPECT_EQ(o.restart_policy, RestartPolicy::kGroup);
  EXPECT_EQ(o.recovery_mode, RecoveryMode::kReplace);
  EXPECT_EQ(o.stop_timeout_s, 30);
  EXPECT_EQ(o.signals_to_handle,
            (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(o.redirects.For(0), 0);
  EXPECT_EQ(o.tee.For(0), 0);
  EXPECT_FALSE(o.master_port_set);
  EXPECT_EQ(o.distribution, Distribution::kPytorch);
  EXPECT_EQ(o.log_format, LogFormat::kText);
}

TEST(LaunchOptionsTest, RankPolicyShrinkMode) {
  auto p = Parse({"--restart-policy=rank", "--recovery_mode", "shrink", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->restart_policy, RestartPolicy::kRank);
  EXPECT_EQ(p.options->recovery_mode, RecoveryMode::kShrink);
}

TEST(LaunchOptionsTest, TensorflowCounts) {
  auto p = Parse({"--distribution", "tensorflow", "--worker-count", "2", "--parameter_server_count",
                  "1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->distribution, Distribution::kTensorflow);
  EXPECT_EQ(p.options->nproc_per_node, 3);
  EXPECT_EQ(p.options->parameter_server_count, 1);
}

TEST(LaunchOptionsTest, StaticMultiNode) {
  auto p = Parse({"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->rdzv_backend, "static");
  EXPECT_EQ(p.options->node_rank, 1);
  EXPECT_EQ(p.options->master_addr, "10.0.0.1");
  EXPECT_EQ(p.options->master_port, 29500);
  EXPECT_TRUE(p.options->rdzv_endpoint.empty());
}

TEST(LaunchOptionsTest, SignalList) {
  EXPECT_EQ(*ParseSignalList("SIGTERM, INT,10"), (std::vector<int>{SIGTERM, SIGINT, 10}));
  EXPECT_EQ(ParseSignalList("SIGFOO").status().message(),
            "--signals-to-handle: 'SIGFOO' is not a signal that can be handled");
  EXPECT_EQ(ParseSignalList("SIGKILL").status().message(),
            "--signals-to-handle: 'SIGKILL' is not a signal that can be handled");
}

TEST(LaunchOptionsTest, HelpExitsZero) {
  auto p = Parse({"--help"});
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_NE(p.output.find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(p.output.find("--rdzv-endpoint"), std::string::npos);
  // Grouped, with defaults.
  EXPECT_NE(p.output.find("Supervision and restarts:"), std::string::npos);
  EXPECT_NE(p.output.find("Azure ML aliases:"), std::string::npos);
  EXPECT_NE(p.output.find("TEXT=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"), std::string::npos);
  EXPECT_NE(p.output.find("--rdzv-backend,--rdzv_backend TEXT=static"), std::string::npos);
}

}  // namespace
}  // namespace dgt::agent
