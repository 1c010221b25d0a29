#include "agent/flags/launch_options.h"

#include <signal.h>

#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// The run id names the log directory under --log-dir: ids that would leave it are refused, not
// rewritten (every node must agree on the id, a rendezvous key too).
TEST(LaunchOptionsTest, RunIdThatLeavesTheLogDirIsRefused) {
  for (const char* flag : {"--rdzv-id=../escape", "--rdzv_id=a/b"}) {
    auto p = Parse({"--standalone", "--log-dir=/tmp/logs", flag, kScript});
    EXPECT_FALSE(p.options.has_value()) << flag;
    EXPECT_EQ(p.exit_code, 2) << flag;
    EXPECT_EQ(p.output, absl::StrCat("dgt-run: error: --rdzv-id must be a non-empty name without "
                                     "'/' or '..' (it also names the log directory), got '",
                                     std::strchr(flag, '=') + 1, "'\n"));
  }
  auto env = [](const char* name) -> const char* {
    return std::strcmp(name, "PET_RDZV_ID") == 0 ? ".." : nullptr;
  };
  EXPECT_EQ(Parse({"--standalone", kScript}, env).exit_code, 2);
  EXPECT_TRUE(Parse({"--standalone", "--rdzv-id=job.v2_1", kScript}).options.has_value());
}

// No other agent can reach a --standalone node's embedded rendezvous: a spare never could join.
TEST(LaunchOptionsTest, StandaloneWithSpareNodesIsAUsageError) {
  auto p = Parse({"--standalone", "--spare-nodes=2", kScript});
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --standalone runs a single node, so no spare can join it, but "
            "--spare-nodes=2\n");
  EXPECT_TRUE(Parse({"--standalone", "--spare-nodes=0", kScript}).options.has_value());
}

// Refused while parsing (exit 2), not by the service after joining or by the file system after
// the round formed (exit 1).
TEST(LaunchOptionsTest, LongOrControlCharacterRunIdIsRefused) {
  auto p = Parse({"--standalone", "--rdzv-id=" + std::string(300, 'x'), kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-id must be at most 128 bytes (it also names the log "
            "directory), got 300\n");
  p = Parse({"--standalone", "--rdzv-id=a\nb", kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-id must not contain control characters, got "
            "'a\\nb'\n");
  EXPECT_TRUE(
      Parse({"--standalone", "--rdzv-id=" + std::string(128, 'x'), kScript}).options.has_value());
}

// Ids that are not UTF-8 text were taken, and protobuf then refused every join's request: the
// agent retried until its join timeout and exited 69. Now usage errors naming flag and byte.
TEST(LaunchOptionsTest, RunAndNodeIdsMustBeUtf8Text) {
  auto p = Parse({"--standalone", "--rdzv-id=job-\xff", kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-id must be UTF-8 text (byte 5 is not), got 'job-\\xff'\n");
  p = Parse({"--standalone", "--node-id=n\xc3(", kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --node-id must be UTF-8 text (byte 2 is not), got 'n\\xc3('\n");
  p = Parse({"--standalone", "--node-id=a\tb", kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --node-id must not contain control characters, got 'a\\tb'\n");
  p = Parse({"--standalone", "--rdzv-id=j\xc3\xa9",
             "--node-id=n\xc5\x91"
             "de",
             kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->run_id, "j\xc3\xa9");
  EXPECT_EQ(p.options->node_id,
            "n\xc5\x91"
            "de");
}

// A --rdzv-tls-* file that is not PEM failed every handshake: "cannot reach the rendezvous
// service" after the whole connect timeout (exit 69). Now a usage error naming flag and path.
TEST(LaunchOptionsTest, TlsFilesThatAreNotPemAreRefused) {
  const std::string not_pem = ::testing::TempDir() + "dgt_launch_options_not_pem.txt";
  std::ofstream(not_pem) << "myhost\n";
  const std::vector<std::string> base = {"--nnodes=2", "--rdzv-endpoint=127.0.0.1:1"};
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(kScript);
    return Parse(args);
  };
  auto p = parse({"--rdzv-tls-ca=" + not_pem});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-tls-ca: '" + not_pem + "' holds no PEM certificate\n");
  p = parse({"--rdzv-tls-ca=/nonexistent/ca.pem"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-tls-ca: cannot read '/nonexistent/ca.pem' "
            "(No such file or directory)\n");
  p = parse({"--rdzv-tls-cert=" + not_pem, "--rdzv-tls-key=" + not_pem});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-tls-cert: '" + not_pem + "' holds no PEM certificate\n");
  p = parse({"--rdzv-tls-cert=" + not_pem});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --rdzv-tls-cert and --rdzv-tls-key must be given together\n");
}

TEST(LaunchOptionsTest, ReadTimeoutBoundsReconnectingToALostService) {
  auto defaults = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", kScript});
  ASSERT_TRUE(defaults.options.has_value()) << defaults.output;
  EXPECT_EQ(defaults.options->reconnect_timeout_s, 60);
  auto p = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", "--rdzv-conf=read_timeout=7.5", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->reconnect_timeout_s, 7.5);
}

// Replicas of one dgt-rendezvous service: every item is checked, for any backend.
TEST(LaunchOptionsTest, RdzvEndpointListOfReplicas) {
  for (const char* backend : {"static", "c10d", "dgt"}) {
    auto p = Parse({"--nnodes=2", std::string("--rdzv-backend=") + backend,
                    "--rdzv-endpoint=10.0.0.1:29400,10.0.0.2", kScript});
    ASSERT_TRUE(p.options.has_value()) << p.output;
    EXPECT_EQ(p.options->rdzv_endpoint, "10.0.0.1:29400,10.0.0.2");
  }
  auto one_node = Parse({"--rdzv-endpoint=a:1,b:2", "--rdzv-conf=is_host=0", kScript});
  ASSERT_TRUE(one_node.options.has_value()) << one_node.output;
}

TEST(LaunchOptionsTest, RdzvEndpointListBadInput) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--nnodes=2", "--rdzv-endpoint=a:29400,b:x", kScript},
       "dgt-run: error: --rdzv-endpoint: port must be 1..65535, got 'b:x' (item 2 of "
       "'a:29400,b:x')\n"},
      {{"--nnodes=2", "--rdzv-endpoint=a:29400,,b:29400", kScript},
       "dgt-run: error: --rdzv-endpoint: empty item 2 in 'a:29400,,b:29400'\n"},
      {{"--nnodes=2", "--rdzv-endpoint=a:29400,b:0", kScript},
       "dgt-run: error: --rdzv-endpoint: port must be 1..65535, got 'b:0' (item 2 of "
       "'a:29400,b:0')\n"},
      {{"--nnodes=2", "--rdzv-endpoint=a:29400,b,a", kScript},
       "dgt-run: error: --rdzv-endpoint: 'a:29400' is listed twice in 'a:29400,b,a'\n"},
      {{"--standalone", "--rdzv-endpoint=a:1,b:1", kScript},
       "dgt-run: error: --standalone embeds its own rendezvous, but --rdzv-endpoint=a:1,b:1 names "
       "replicas of dgt-rendezvous; use one or the other\n"},
      {{"--nnodes=2", "--rdzv-endpoint=a:1,b:1", "--rdzv-conf=is_host=1", kScript},
       "dgt-run: error: --rdzv-conf is_host=1 hosts the rendezvous at one address, but "
       "--rdzv-endpoint=a:1,b:1 names 2 replicas of dgt-rendezvous; give one endpoint, or drop "
       "is_host\n"},
  };
  for (const auto& [args, message] : cases) {
    auto p = Parse(args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_EQ(p.output, message);
  }
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
      {{"--nnodes=2", "--rdzv-endpoint=h:65536", kScript},
       "dgt-run: error: --rdzv-endpoint: port must be 0..65535, got 'h:65536'\n"},
      {{"--rdzv-backend=c10d", "--nnodes=2", kScript},
       "dgt-run: error: --rdzv-endpoint is required for --nnodes=2 (or use --standalone for one "
       "node)\n"},
      {{"--standalone", "no_such_script.py"},
       "dgt-run: error: training script 'no_such_script.py' does not exist\n"},
      {{"--standalone"},
       "dgt-run: error: missing the training script (usage: dgt-run [flags] [--] script.py "
       "[script args])\n"},
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
       "dgt-run: error: --rdzv-conf keep_alive_interval must be a number of seconds from 0.001 to "
       "31536000 (a year), got 'x'\n"},
      {{"--rdzv-conf=join_timeout=-1", kScript},
       "dgt-run: error: --rdzv-conf join_timeout must be a number of seconds from 0.001 to "
       "31536000 (a year), got '-1'\n"},
      {{"--standalone", "--nnodes=2", kScript},
       "dgt-run: error: --standalone runs a single node, but --nnodes=2\n"},
      {{"-r", "4", kScript},
       "dgt-run: error: --redirects must be 0..3 or LOCAL_RANK:0..3,..., "
       "got '4'\n"},
      {{"--tee", "0:x", kScript},
       "dgt-run: error: --tee must be 0..3 or LOCAL_RANK:0..3,..., got '0:x'\n"},
      {{"--local-ranks-filter=a", kScript},
       "dgt-run: error: --local-ranks-filter must be local ranks like 0,2, got 'a'\n"},
      // An empty item, as torchrun 2.13's int('') refuses it.
      {{"--local-ranks-filter", "0,,1", kScript},
       "dgt-run: error: --local-ranks-filter must be local ranks like 0,2, got '0,,1'\n"},
      {{"--local-ranks-filter=0,", kScript},
       "dgt-run: error: --local-ranks-filter must be local ranks like 0,2, got '0,'\n"},
      {{"--log-format=xml", kScript},
       "dgt-run: error: --log-format must be text or json, got 'xml'\n"},
      {{"--distribution=horovod", kScript},
       "dgt-run: error: --distribution must be pytorch, tensorflow or mpi, got 'horovod'\n"},
      {{"--restart-policy=node", kScript},
       "dgt-run: error: --restart-policy must be group or rank, got 'node'\n"},
      {{"--signals-to-handle=SIGNOPE", kScript},
       "dgt-run: error: --signals-to-handle: 'SIGNOPE' is not a signal that can be handled\n"},
      {{"--master-port=0", kScript},
       "dgt-run: error: --master-port must be an integer from 1 to 65535, got '0'\n"},
      // Numbers go through common/flag_parse.h: name the flag, the value and a readable bound.
      {{"--master-port=abc", kScript},
       "dgt-run: error: --master-port must be an integer from 1 to 65535, got 'abc'\n"},
      {{"--node-rank=-5", kScript},
       "dgt-run: error: --node-rank must be an integer from 0 to 999999, got '-5'\n"},
      {{"--max-restarts=99999999999999999999", kScript},
       "dgt-run: error: --max-restarts must be an integer from 0 to 1000000, got "
       "'99999999999999999999'\n"},
      {{"--stop-timeout=-1", kScript},
       "dgt-run: error: --stop-timeout must be a number of seconds from 0 to 31536000 (a year), "
       "got '-1'\n"},
      {{"--join-timeout=nan", kScript},
       "dgt-run: error: --join-timeout must be a number of seconds from 0.001 to 31536000 (a "
       "year), got 'nan'\n"},
      {{"--rdzv-connect-timeout=1e20", kScript},
       "dgt-run: error: --rdzv-connect-timeout must be a number of seconds from 0.001 to "
       "31536000 (a year), got '1e20'\n"},
      {{"--monitor-interval=inf", kScript},
       "dgt-run: error: --monitor-interval must be a number of seconds from 0 to 31536000 (a "
       "year), got 'inf'\n"},
      {{"--worker-count=-1", kScript},
       "dgt-run: error: --worker-count must be an integer from 0 to 1000000, got '-1'\n"},
      // At most 4096 workers per node (was 1000000: 100000 took minutes to stop, filled pid_max).
      {{"--nproc-per-node=1000001", kScript},
       "dgt-run: error: --nproc-per-node must be at most 4096, got 1000001\n"},
      {{"--nproc-per-node=4097", kScript},
       "dgt-run: error: --nproc-per-node must be at most 4096, got 4097\n"},
      {{"--process-count-per-instance=100000", kScript},
       "dgt-run: error: --process-count-per-instance must be at most 4096, got 100000\n"},
      {{"--process-count-per-instance=lots", kScript},
       "dgt-run: error: --process-count-per-instance must be an integer, auto, cpu or gpu, got "
       "'lots'\n"},
      {{"--nnodes=2147483647", "--nproc-per-node=2", "--rdzv-endpoint=h:1", kScript},
       "dgt-run: error: --nnodes=2147483647 with --nproc-per-node=2 makes 4294967294 ranks, more "
       "than 2147483647\n"},
      {{"--nnodes=1000000", "--nproc-per-node=4096", "--rdzv-endpoint=h:1", kScript},
       "dgt-run: error: --nnodes=1000000 with --nproc-per-node=4096 makes 4096000000 ranks, more "
       "than 2147483647\n"},
      {{"--start-method=foo", kScript},
       "dgt-run: error: --start-method must be spawn, fork or forkserver, got 'foo'\n"},
      {{"--local-addr=192.0.2.7", kScript},
       "dgt-run: error: --local-addr=192.0.2.7: 192.0.2.7 is not an address of this host\n"},
      // Multi-node without an address for the other nodes: 127.0.0.1 makes worlds of one.
      {{"--nnodes=2", kScript},
       "dgt-run: error: --nnodes=2 with --rdzv-backend=static needs --master-addr (the address "
       "of node rank 0, reachable from every node), or --rdzv-endpoint of dgt-rendezvous\n"},
      {{"--instance-count=3", "--node-rank=1", kScript},
       "dgt-run: error: --nnodes=3 with --rdzv-backend=static needs --master-addr (the address "
       "of node rank 0, reachable from every node), or --rdzv-endpoint of dgt-rendezvous\n"},
      // A join timeout that ends before the last call would fail every elastic round.
      {{"--nnodes=1:2", "--rdzv-endpoint=h:1", "--join-timeout=5", kScript},
       "dgt-run: error: --join-timeout=5 is shorter than --rdzv-conf last_call_timeout=30: with "
       "--nnodes=1:2 the round waits that long for more nodes once 1 joined, so it would time "
       "out; raise the one or lower the other\n"},
      {{"--nnodes=1:2", "--rdzv-endpoint=h:1", "--rdzv-conf=timeout=10,last_call_timeout=20",
        kScript},
       "dgt-run: error: --rdzv-conf timeout=10 is shorter than --rdzv-conf last_call_timeout=20: "
       "with --nnodes=1:2 the round waits that long for more nodes once 1 joined, so it would "
       "time out; raise the one or lower the other\n"},
      {{"--rdzv-backend=static", "--nnodes=1:2", kScript},
       "dgt-run: error: --rdzv-backend=static needs a fixed --nnodes, got '1:2' (use "
       "--rdzv-endpoint of dgt-rendezvous for elastic jobs)\n"},
      {{"--nnodes=2", "--node-rank=2", kScript},
       "dgt-run: error: --node-rank must be 0..1 for --nnodes=2, got 2\n"},
      // The static form cannot restart several nodes together: refused before anything starts.
      {{"--nnodes=2", "--master-addr=127.0.0.1", "--max-restarts=1", kScript},
       "dgt-run: error: --max-restarts=1 with --restart-policy=group needs a rendezvous service: "
       "the static form (--rdzv-backend=static, --nnodes=2 without --rdzv-endpoint) cannot "
       "restart several nodes together; use --rdzv-endpoint of dgt-rendezvous, or "
       "--restart-policy=rank, or --max-restarts=0\n"},
      {{"--distribution=tensorflow", "--worker-count=2", "--nproc-per-node=4", kScript},
       "dgt-run: error: --worker-count=2 + --parameter-server-count=0 must equal the number of "
       "processes, 4\n"},
      // Across nodes the TensorFlow counts are the job's.
      {{"--distribution=tensorflow", "--nnodes=2", "--master-addr=127.0.0.1", "--worker-count=2",
        "--nproc-per-node=2", kScript},
       "dgt-run: error: --worker-count=2 + --parameter-server-count=0 must equal the number of "
       "processes, 4 (--nnodes=2 x --nproc-per-node=2)\n"},
      {{"--distribution=tensorflow", "--nnodes=2", "--master-addr=127.0.0.1", "--worker-count=2",
        "--parameter-server-count=1", kScript},
       "dgt-run: error: --worker-count=2 + --parameter-server-count=1 = 3 processes cannot be "
       "spread evenly over --nnodes=2\n"},
      {{"--distribution=tensorflow", "--nnodes=1:2", "--rdzv-endpoint=127.0.0.1:29400",
        "--worker-count=2", kScript},
       "dgt-run: error: --worker-count needs a fixed --nnodes (the job's process count), got "
       "--nnodes=1:2\n"},
      {{"--distribution=tensorflow", "--nnodes=2:4", "--rdzv-endpoint=127.0.0.1:29400",
        "--parameter-server-count=1", "--tf-chief", kScript},
       "dgt-run: error: --distribution tensorflow needs at least one worker: 2 process(es) (at "
       "the fewest nodes) for 2 parameter server(s)/chief\n"},
      {{"-m", "--no-python", "x"},
       "dgt-run: error: -m/--module and --no-python exclude each other\n"},
      // torchrun 2.13's newer flags.
      {{"--numa-binding=nodes", kScript},
       "dgt-run: error: --numa-binding must be one of node, socket, exclusive, core-complex (as "
       "torchrun 2.13), got 'nodes'\n"},
      {{"--numa_binding", "node", kScript},
       "dgt-run: error: --numa-binding=node is not supported on this host: dgt-run does not bind "
       "workers to NUMA nodes (torchrun 2.13 runs each worker under numactl); start the script "
       "through numactl yourself (--no-python with a wrapper), or leave the flag out\n"},
      {{"--event-log-handler=file", kScript},
       "dgt-run: error: --event-log-handler must be one of console, dynamic_rendezvous, null (the "
       "handlers torchrun 2.13 registers), got 'file'\n"},
      {{"--shutdown-timeout=-1", kScript},
       "dgt-run: error: --shutdown-timeout must be a number of seconds from 0 to 31536000 (a "
       "year), got '-1'\n"},
      {{"--stop-timeout=5", "--shutdown_timeout=6", kScript},
       "dgt-run: error: --stop-timeout=5 and --shutdown-timeout=6 disagree: --shutdown-timeout is "
       "an alias of --stop-timeout; give one\n"},
      {{"--nnodes=2", "--rdzv-endpoint=10.0.0.1:0", kScript},
       "dgt-run: error: --rdzv-endpoint=10.0.0.1:0: port 0 (a free port) is for a single node, "
       "but --nnodes=2; give the port every node connects to\n"},
      {{"--"},
       "dgt-run: error: missing the training script (usage: dgt-run [flags] [--] "
       "script.py [script args])\n"},
  };
  for (const BadCase& c : cases) {
    auto p = Parse(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_EQ(p.output, c.message);
  }
}

// An empty value given as its own argument is refused as "--flag=" is (torchrun
// 2.13's argparse: "invalid int value: ''"), not taken as "not given".
TEST(LaunchOptionsTest, EmptyNumericValueIsRefused) {
  for (const char* flag : {"--max-restarts", "--standby-workers", "--spare-nodes", "--node-rank",
                           "--master-port", "--worker-count", "--parameter-server-count"}) {
    auto p = Parse({"--standalone", flag, "", kScript});
    EXPECT_FALSE(p.options.has_value()) << flag;
    EXPECT_EQ(p.exit_code, 2) << flag;
    EXPECT_EQ(p.output,
              absl::StrCat("dgt-run: error: ", flag, " needs a value, got an empty one\n"));
  }
  // Not given at all: the defaults stay.
  auto ok = Parse({"--standalone", kScript});
  ASSERT_TRUE(ok.options.has_value()) << ok.output;
  EXPECT_EQ(ok.options->max_restarts, 0);
  EXPECT_FALSE(ok.options->master_port_set);
}

// An empty PET_* default of a numeric flag is refused, naming the variable (torchrun 2.13's
// argparse converts PET_MAX_RESTARTS="" with int() and fails); an empty text one is ignored.
TEST(LaunchOptionsTest, EmptyNumericPetDefaultIsRefused) {
  auto p = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_MAX_RESTARTS") == 0 ? "" : nullptr;
  });
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: PET_MAX_RESTARTS (the default of --max-restarts) is set but empty: "
            "give a number or unset it\n");
  auto port = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_MASTER_PORT") == 0 ? "" : nullptr;
  });
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_EQ(port.output,
            "dgt-run: error: PET_MASTER_PORT (the default of --master-port) is set but empty: "
            "give a number or unset it\n");
  // The command line wins: the empty default is never read.
  auto given = Parse({"--max-restarts", "2", kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_MAX_RESTARTS") == 0 ? "" : nullptr;
  });
  ASSERT_TRUE(given.options.has_value()) << given.output;
  EXPECT_EQ(given.options->max_restarts, 2);
  auto text = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_LOG_DIR") == 0 ? "" : nullptr;
  });
  ASSERT_TRUE(text.options.has_value()) << text.output;
  EXPECT_EQ(text.options->log_dir, "");
}

// Flags without effect are accepted with a warning.
TEST(LaunchOptionsTest, IgnoredFlagsAreWarned) {
  auto filter =
      Parse({"--standalone", "--nproc-per-node=2", "--local-ranks-filter=1,5,7", kScript});
  ASSERT_TRUE(filter.options.has_value()) << filter.output;
  EXPECT_EQ(filter.options->local_ranks_filter, (std::set<int>{1, 5, 7}));
  EXPECT_EQ(filter.options->warnings,
            (std::vector<std::string>{
                "--local-ranks-filter=1,5,7: no local rank 5, 7 on this node (--nproc-per-node=2, "
                "local ranks 0..1); only the others are shown"}));
  auto none = Parse({"--standalone", "--local-ranks-filter=5", kScript});
  ASSERT_TRUE(none.options.has_value()) << none.output;
  EXPECT_EQ(none.options->warnings,
            (std::vector<std::string>{
                "--local-ranks-filter=5: no local rank 5 on this node (--nproc-per-node=1, local "
                "ranks 0..0); no worker output reaches the console"}));
  auto addr = Parse({"--standalone", "--master-addr=10.9.9.9", "--master-port=1", kScript});
  ASSERT_TRUE(addr.options.has_value()) << addr.output;
  EXPECT_EQ(addr.options->master_port, 1);  // Used: the single node's store port.
  EXPECT_EQ(addr.options->warnings,
            (std::vector<std::string>{
                "--master-addr=10.9.9.9 is ignored: it is used only with --rdzv-backend=static, "
                "--nnodes>1 and no --rdzv-endpoint (one node hosts its store on this host)"}));
  auto multi = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", "--master-addr=10.9.9.9", kScript});
  ASSERT_TRUE(multi.options.has_value()) << multi.output;
  EXPECT_EQ(multi.options->warnings,
            (std::vector<std::string>{
                "--master-addr=10.9.9.9 is ignored: it is used only with --rdzv-backend=static, "
                "--nnodes>1 and no --rdzv-endpoint (node rank 0's address comes from the "
                "rendezvous service)"}));
  // Used: no warning.
  auto used = Parse(
      {"--nnodes=2", "--node-rank=1", "--master-addr=10.9.9.9", "--local-ranks-filter=0", kScript});
  ASSERT_TRUE(used.options.has_value()) << used.output;
  EXPECT_TRUE(used.options->warnings.empty());
  auto empty = Parse({"--standalone", "--local-ranks-filter", "", kScript});
  ASSERT_TRUE(empty.options.has_value()) << empty.output;
  EXPECT_TRUE(empty.options->local_ranks_filter.empty());  // "": every rank, as torchrun.
  EXPECT_TRUE(empty.options->warnings.empty());
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
  auto q = Parse({"--process-count-per-instance=6", "/bin/true"}, PetEnv);
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
  // torchrun 2.13's default: SIGUSR1/SIGUSR2 only when listed.
  EXPECT_EQ(o.signals_to_handle, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
  EXPECT_EQ(o.signals_to_handle_text, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  EXPECT_EQ(o.event_log_handler, "null");
  EXPECT_EQ(o.logs_specs, "");
  EXPECT_TRUE(o.duplicate_stdout_filters.empty());
  EXPECT_TRUE(o.duplicate_stderr_filters.empty());
  EXPECT_FALSE(o.virtual_local_rank);
  EXPECT_EQ(o.log_line_prefix_template, "");
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

TEST(LaunchOptionsTest, TensorflowCountsAcrossNodes) {
  // 3 workers + 1 ps over 2 nodes: 2 processes per node.
  auto p =
      Parse({"--distribution=tensorflow", "--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1",
             "--worker-count=3", "--parameter-server-count=1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->nproc_per_node, 2);
  EXPECT_EQ(p.options->worker_count, 3);
  EXPECT_EQ(p.options->parameter_server_count, 1);
  // Elastic, without --worker-count: every process that is not a ps is a worker.
  auto elastic = Parse({"--distribution=tensorflow", "--nnodes=1:3", "--nproc-per-node=2",
                        "--rdzv-endpoint=127.0.0.1:29400", "--parameter-server-count=1", kScript});
  ASSERT_TRUE(elastic.options.has_value()) << elastic.output;
  EXPECT_EQ(elastic.options->max_nodes, 3);
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

// A rank restart stays on its node (the store of node rank 0 carries the recovery), so the
// static form keeps it; a group restart would need the rendezvous service (refused above).
TEST(LaunchOptionsTest, StaticMultiNodeKeepsRankRestarts) {
  auto p = Parse({"--nnodes=2", "--master-addr=127.0.0.1", "--max-restarts=1",
                  "--restart-policy=rank", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_restarts, 1);
  EXPECT_EQ(p.options->restart_policy, RestartPolicy::kRank);
  auto endpoint = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", "--max-restarts=1", kScript});
  ASSERT_TRUE(endpoint.options.has_value()) << endpoint.output;
  EXPECT_EQ(endpoint.options->max_restarts, 1);
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
  EXPECT_NE(
      p.output.find("--signals-to-handle,--signals_to_handle TEXT=SIGTERM,SIGINT,SIGHUP,SIGQUIT\n"),
      std::string::npos);
  EXPECT_NE(p.output.find("--rdzv-backend,--rdzv_backend TEXT=static"), std::string::npos);
}

// Aliases of one setting that disagree are refused, naming both; torchrun has no such pairs, and
// silently picking one ran 2 nodes for --nnodes=1 --instance-count=2.
TEST(LaunchOptionsTest, DisagreeingAliasesAreRefused) {
  const BadCase cases[] = {
      {{"--nnodes=1", "--instance-count=2", kScript},
       "dgt-run: error: --nnodes=1 and --instance-count=2 disagree: --instance-count is an alias "
       "of --nnodes; give one\n"},
      {{"--instance_count=2", "--nnodes=1:2", "--rdzv-endpoint=h:1", kScript},
       "dgt-run: error: --nnodes=1:2 and --instance-count=2 disagree: --instance-count is an "
       "alias of --nnodes; give one\n"},
      {{"--nproc-per-node=3", "--process-count-per-instance=2", kScript},
       "dgt-run: error: --nproc-per-node=3 and --process-count-per-instance=2 disagree: "
       "--process-count-per-instance is an alias of --nproc-per-node; give one\n"},
      {{"--join-timeout=2", "--rdzv-conf=join_timeout=5", kScript},
       "dgt-run: error: --join-timeout=2 and --rdzv-conf join_timeout=5 disagree: both set the "
       "join timeout; give one\n"},
      {{"--rdzv-conf=join_timeout=5,timeout=6", kScript},
       "dgt-run: error: --rdzv-conf join_timeout=5 and --rdzv-conf timeout=6 disagree: both set "
       "the join timeout; give one\n"},
      {{"--instance-count=x", kScript},
       "dgt-run: error: --instance-count must be N or MIN:MAX with 0 < MIN <= MAX, got 'x'\n"},
  };
  for (const BadCase& c : cases) {
    auto p = Parse(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_EQ(p.output, c.message);
  }
  // Aliases that agree are fine ("2" and "2:2" are one value).
  auto same = Parse({"--nnodes=2:2", "--instance-count=2", "--nproc-per-node=4",
                     "--process_count_per_instance=4", "--rdzv-endpoint=h:1", kScript});
  ASSERT_TRUE(same.options.has_value()) << same.output;
  EXPECT_EQ(same.options->max_nodes, 2);
  EXPECT_EQ(same.options->nproc_per_node, 4);
  auto agree = Parse({"--join-timeout=5", "--rdzv-conf=join_timeout=5.0", kScript});
  ASSERT_TRUE(agree.options.has_value()) << agree.output;
  EXPECT_EQ(agree.options->join_timeout_s, 5);
  EXPECT_EQ(agree.options->join_timeout_flag, "--join-timeout");
}

// A repeated flag takes its last value, as torchrun's argparse does.
TEST(LaunchOptionsTest, RepeatedFlagTakesTheLastValue) {
  auto p = Parse({"--nproc-per-node=3", "--nproc_per_node=2", "--max-restarts=1",
                  "--max-restarts=4", "--join-timeout=7", "--join-timeout=9", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->nproc_per_node, 2);
  EXPECT_EQ(p.options->max_restarts, 4);
  EXPECT_EQ(p.options->join_timeout_s, 9);
}

// The join-timeout message names the flag the user gave.
TEST(LaunchOptionsTest, JoinTimeoutFlagIsRecorded) {
  auto conf = Parse({"--rdzv-conf=join_timeout=5", kScript});
  ASSERT_TRUE(conf.options.has_value()) << conf.output;
  EXPECT_EQ(conf.options->join_timeout_s, 5);
  EXPECT_EQ(conf.options->join_timeout_flag, "--rdzv-conf join_timeout");
  auto old = Parse({"--rdzv-conf=timeout=7", kScript});
  ASSERT_TRUE(old.options.has_value()) << old.output;
  EXPECT_EQ(old.options->join_timeout_flag, "--rdzv-conf timeout");
  auto flag = Parse({"--join-timeout=3", kScript});
  ASSERT_TRUE(flag.options.has_value()) << flag.output;
  EXPECT_EQ(flag.options->join_timeout_flag, "--join-timeout");
}

// An explicit loopback master (the e2e tests run 2 nodes on one host) and PET_MASTER_ADDR count
// as given; start methods torchrun knows are accepted; an elastic round whose join timeout
// covers the last call is fine, and so is a short join timeout for a fixed --nnodes.
TEST(LaunchOptionsTest, AcceptedCounterparts) {
  auto loop = Parse({"--nnodes=2", "--master-addr=127.0.0.1", kScript});
  ASSERT_TRUE(loop.options.has_value()) << loop.output;
  auto env = Parse({"--nnodes=2", kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_MASTER_ADDR") == 0 ? "10.0.0.1" : nullptr;
  });
  ASSERT_TRUE(env.options.has_value()) << env.output;
  EXPECT_EQ(env.options->master_addr, "10.0.0.1");
  for (const char* method : {"spawn", "fork", "forkserver"}) {
    auto p = Parse({absl::StrCat("--start-method=", method), kScript});
    ASSERT_TRUE(p.options.has_value()) << p.output;
  }
  auto elastic = Parse({"--nnodes=1:2", "--rdzv-endpoint=h:1", "--join-timeout=30", kScript});
  ASSERT_TRUE(elastic.options.has_value()) << elastic.output;
  auto fixed = Parse({"--nnodes=2", "--rdzv-endpoint=h:1", "--join-timeout=2", kScript});
  ASSERT_TRUE(fixed.options.has_value()) << fixed.output;
  auto local = Parse({"--local-addr=127.0.0.1", kScript});
  ASSERT_TRUE(local.options.has_value()) << local.output;
}

// "--" ends dgt-run's flags as it ends torchrun's: the next argument is the script even when it
// starts with '-', and a later "--" belongs to the script.
TEST(LaunchOptionsTest, DoubleDashEndsTheFlags) {
  auto p = Parse({"--nproc-per-node=2", "--", kScript, "--nnodes=3", "--", "x"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->nproc_per_node, 2);
  EXPECT_EQ(p.options->min_nodes, 1);
  EXPECT_EQ(p.options->command, (std::vector<std::string>{kScript, "--nnodes=3", "--", "x"}));
  // Without "--" such a script is taken for an unknown flag; after it, for the script.
  auto dash = Parse({"--no-python", "--", "-weird", "a"});
  ASSERT_TRUE(dash.options.has_value()) << dash.output;
  EXPECT_EQ(dash.options->command, (std::vector<std::string>{"-weird", "a"}));
  // As torchrun's argparse: the first "--" also goes when it comes right after the script.
  for (const auto& [args, command] :
       std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{kScript, "--", "a"}, {kScript, "a"}},
           {{kScript, "a", "--", "b"}, {kScript, "a", "--", "b"}},
           {{kScript, "--", "--", "b"}, {kScript, "--", "b"}},
           {{"--", kScript, "--"}, {kScript, "--"}},
           {{kScript, "--"}, {kScript}},
       }) {
    auto q = Parse(args);
    ASSERT_TRUE(q.options.has_value()) << q.output;
    EXPECT_EQ(q.options->command, command) << absl::StrJoin(args, " ");
  }
  // "-- -- script a": torchrun 2.13's argparse makes "--" the script and runs
  // "python -u -- script a", so the script runs with ['a']; the same argv here.
  auto script_dashdash = Parse({"--", "--", kScript, "a"});
  ASSERT_TRUE(script_dashdash.options.has_value()) << script_dashdash.output;
  EXPECT_EQ(script_dashdash.options->command, (std::vector<std::string>{"--", kScript, "a"}));
  auto missing_after = Parse({"--", "--", "no_such_script.py"});
  EXPECT_EQ(missing_after.exit_code, 2);
  EXPECT_EQ(missing_after.output,
            "dgt-run: error: training script 'no_such_script.py' does not exist\n");
  // "-- -- --": Python would open a file named "--", as torchrun 2.13's worker does.
  auto third = Parse({"--", "--", "--", kScript});
  EXPECT_EQ(third.exit_code, 2);
  EXPECT_EQ(third.output, "dgt-run: error: training script '--' does not exist\n");
  auto unknown = Parse({"--no-python", "-weird", "a"});
  EXPECT_EQ(unknown.output, "dgt-run: error: unknown flag '-weird' (see dgt-run --help)\n");
}

TEST(LaunchOptionsTest, ShutdownTimeoutIsStopTimeout) {
  auto alias = Parse({"--shutdown-timeout=7", kScript});
  ASSERT_TRUE(alias.options.has_value()) << alias.output;
  EXPECT_EQ(alias.options->stop_timeout_s, 7);
  auto agree = Parse({"--shutdown_timeout", "4", "--stop-timeout=4", kScript});
  ASSERT_TRUE(agree.options.has_value()) << agree.output;
  EXPECT_EQ(agree.options->stop_timeout_s, 4);
  // torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT when neither flag is given.
  auto env = [](const char* name) -> const char* {
    return std::strcmp(name, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT") == 0 ? "12" : nullptr;
  };
  auto from_env = Parse({kScript}, env);
  ASSERT_TRUE(from_env.options.has_value()) << from_env.output;
  EXPECT_EQ(from_env.options->stop_timeout_s, 12);
  auto flag_wins = Parse({"--stop-timeout=3", kScript}, env);
  ASSERT_TRUE(flag_wins.options.has_value()) << flag_wins.output;
  EXPECT_EQ(flag_wins.options->stop_timeout_s, 3);
  auto bad_env = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT") == 0 ? "soon" : nullptr;
  });
  EXPECT_EQ(bad_env.exit_code, 2);
  EXPECT_EQ(bad_env.output,
            "dgt-run: error: TORCH_ELASTIC_SHUTDOWN_TIMEOUT must be a number of seconds from 0 to "
            "31536000 (a year), got 'soon'\n");
  auto pet = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_SHUTDOWN_TIMEOUT") == 0 ? "9" : nullptr;
  });
  ASSERT_TRUE(pet.options.has_value()) << pet.output;
  EXPECT_EQ(pet.options->stop_timeout_s, 9);
  // A PET_* default gives way to an explicit flag of the same setting, as torchrun's do.
  auto pet_shutdown = [](const char* name) -> const char* {
    return std::strcmp(name, "PET_SHUTDOWN_TIMEOUT") == 0 ? "5" : nullptr;
  };
  auto explicit_stop = Parse({"--stop-timeout", "6", kScript}, pet_shutdown);
  ASSERT_TRUE(explicit_stop.options.has_value()) << explicit_stop.output;
  EXPECT_EQ(explicit_stop.options->stop_timeout_s, 6);
  auto pet_stop = [](const char* name) -> const char* {
    return std::strcmp(name, "PET_STOP_TIMEOUT") == 0 ? "5" : nullptr;
  };
  auto explicit_shutdown = Parse({"--shutdown-timeout=8", kScript}, pet_stop);
  ASSERT_TRUE(explicit_shutdown.options.has_value()) << explicit_shutdown.output;
  EXPECT_EQ(explicit_shutdown.options->stop_timeout_s, 8);
  // Two explicit flags that disagree stay an error.
  auto both = Parse({"--stop-timeout=6", "--shutdown-timeout=8", kScript}, pet_shutdown);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_EQ(both.output,
            "dgt-run: error: --stop-timeout=6 and --shutdown-timeout=8 disagree: "
            "--shutdown-timeout is an alias of --stop-timeout; give one\n");
}

// torchrun 2.13's store_true flags refuse a value (argparse: "ignored explicit argument"); so do
// all of dgt-run's switches.
TEST(LaunchOptionsTest, SwitchGivenAValueIsRefused) {
  for (const auto& [arg, name, value] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--virtual-local-rank=1", "--virtual-local-rank", "1"},
           {"--virtual_local_rank=0", "--virtual_local_rank", "0"},
           {"--virtual-local-rank=false", "--virtual-local-rank", "false"},
           {"--standalone=true", "--standalone", "true"},
           {"--no-python=1", "--no-python", "1"},
           {"--module=0", "--module", "0"},
           {"--run-path=1", "--run-path", "1"},
           {"--pass-local-rank-arg=1", "--pass-local-rank-arg", "1"},
           {"--tf-chief=1", "--tf-chief", "1"},
       }) {
    auto p = Parse({arg, kScript});
    EXPECT_EQ(p.exit_code, 2) << arg;
    EXPECT_EQ(p.output,
              absl::StrCat("dgt-run: error: ", name,
                           " takes no value (a switch, as in torchrun 2.13), got '", value, "'\n"));
  }
  // After the script, the same text belongs to the script.
  auto script_arg = Parse({kScript, "--standalone=1"});
  ASSERT_TRUE(script_arg.options.has_value()) << script_arg.output;
  EXPECT_EQ(script_arg.options->command, (std::vector<std::string>{kScript, "--standalone=1"}));
}

TEST(LaunchOptionsTest, DuplicateFiltersSplitAsTorchrun) {
  EXPECT_EQ(SplitDuplicateFilters("apple,orange"), (std::vector<std::string>{"apple", "orange"}));
  EXPECT_EQ(SplitDuplicateFilters("a,,b"), (std::vector<std::string>{"a,b"}));
  EXPECT_EQ(SplitDuplicateFilters("a,,,b"), (std::vector<std::string>{"a,", "b"}));
  EXPECT_EQ(SplitDuplicateFilters(""), (std::vector<std::string>{""}));
  EXPECT_EQ(SplitDuplicateFilters("a,"), (std::vector<std::string>{"a", ""}));
  auto p = Parse(
      {"--duplicate-stdout-filters", "loss,,x,acc", "--duplicate_stderr_filters=Error", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->duplicate_stdout_filters, (std::vector<std::string>{"loss,x", "acc"}));
  EXPECT_EQ(p.options->duplicate_stderr_filters, (std::vector<std::string>{"Error"}));
  auto pet = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "PET_DUPLICATE_STDERR_FILTERS") == 0 ? "warn" : nullptr;
  });
  ASSERT_TRUE(pet.options.has_value()) << pet.output;
  EXPECT_EQ(pet.options->duplicate_stderr_filters, (std::vector<std::string>{"warn"}));
}

TEST(LaunchOptionsTest, AcceptedTorchrunCompatibilityFlags) {
  auto p = Parse(
      {"--event_log_handler=console", "--logs-specs", "my_specs", "--virtual-local-rank", kScript},
      FourGpus);
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->event_log_handler, "console");
  EXPECT_EQ(p.options->logs_specs, "my_specs");
  EXPECT_TRUE(p.options->virtual_local_rank);
  // torchrun reads no PET_ variable for --logs-specs and --numa-binding.
  auto pet = Parse({kScript}, [](const char* name) -> const char* {
    if (std::strcmp(name, "PET_LOGS_SPECS") == 0) return "x";
    if (std::strcmp(name, "PET_NUMA_BINDING") == 0) return "node";
    if (std::strcmp(name, "PET_VIRTUAL_LOCAL_RANK") == 0) return "1";
    return nullptr;
  });
  ASSERT_TRUE(pet.options.has_value()) << pet.output;
  EXPECT_EQ(pet.options->logs_specs, "");
  EXPECT_TRUE(pet.options->virtual_local_rank);
}

TEST(LaunchOptionsTest, VirtualLocalRankNeedsADevicePerWorker) {
  auto p = Parse({"--virtual-local-rank", "--nproc-per-node=5", kScript}, FourGpus);
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: --virtual-local-rank: local rank 4 has no device in "
            "CUDA_VISIBLE_DEVICES='0,1,2,3' (--nproc-per-node=5)\n");
  // Without CUDA_VISIBLE_DEVICES each worker gets its local rank as its device.
  auto unset = Parse({"--virtual-local-rank", "--nproc-per-node=5", kScript});
  ASSERT_TRUE(unset.options.has_value()) << unset.output;
}

TEST(LaunchOptionsTest, FreePortEndpointForOneNode) {
  auto p = Parse({"--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->rdzv_endpoint, "localhost:0");
}

TEST(LaunchOptionsTest, PythonExecAndPrefixTemplateFromTheEnvironment) {
  auto env = [](const char* name) -> const char* {
    if (std::strcmp(name, "PYTHON_EXEC") == 0) return "/opt/py/bin/python";
    if (std::strcmp(name, "DGT_PYTHON") == 0) return "/usr/bin/python3";
    if (std::strcmp(name, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") == 0) return "[${rank}]:";
    return nullptr;
  };
  auto p = Parse({kScript}, env);
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->python, "/opt/py/bin/python");
  EXPECT_EQ(p.options->log_line_prefix_template, "[${rank}]:");
  auto dgt = Parse({kScript}, [](const char* name) -> const char* {
    return std::strcmp(name, "DGT_PYTHON") == 0 ? "/usr/bin/python3" : nullptr;
  });
  ASSERT_TRUE(dgt.options.has_value()) << dgt.output;
  EXPECT_EQ(dgt.options->python, "/usr/bin/python3");
}

// --spare-nodes (docs/RENDEZVOUS.md "Hot spare nodes"): a count the JoinRequest carries.
TEST(LaunchOptionsTest, SpareNodes) {
  auto plain = Parse({kScript});
  ASSERT_TRUE(plain.options.has_value()) << plain.output;
  EXPECT_EQ(plain.options->spare_nodes, 0);
  auto p = Parse({"--nnodes=1:4", "--rdzv-endpoint=10.0.0.1:29400", "--spare_nodes", "2", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->spare_nodes, 2);
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--spare-nodes=-1", kScript},
       "dgt-run: error: --spare-nodes must be an integer from 0 to 1000, got '-1'\n"},
      {{"--spare-nodes=1001", kScript},
       "dgt-run: error: --spare-nodes must be an integer from 0 to 1000, got '1001'\n"}};
  for (const auto& [args, message] : bad) {
    auto r = Parse(args);
    EXPECT_FALSE(r.options.has_value()) << args[0];
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output, message);
  }
}

// --standby-workers (docs/RECOVERY.md "Warm standbys"): a count, for rank restarts only.
TEST(LaunchOptionsTest, StandbyWorkers) {
  auto plain = Parse({kScript});
  ASSERT_TRUE(plain.options.has_value()) << plain.output;
  EXPECT_EQ(plain.options->standby_workers, 0);
  auto p = Parse({"--restart-policy=rank", "--standby_workers", "2", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->standby_workers, 2);
  // The cap is --nproc-per-node's: more would fill pid_max and delay a stop signal.
  auto most = Parse({"--restart-policy=rank", "--standby-workers=4096", kScript});
  ASSERT_TRUE(most.options.has_value()) << most.output;
  EXPECT_EQ(most.options->standby_workers, 4096);
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--standby-workers=1", kScript},
       "dgt-run: error: --standby-workers=1 needs --restart-policy=rank and "
       "--recovery-mode=replace (standbys replace failed ranks)\n"},
      {{"--restart-policy=rank", "--recovery-mode=shrink", "--standby-workers=1", kScript},
       "dgt-run: error: --standby-workers=1 needs --restart-policy=rank and "
       "--recovery-mode=replace (standbys replace failed ranks)\n"},
      {{"--restart-policy=rank", "--standby-workers=-1", kScript},
       "dgt-run: error: --standby-workers must be an integer from 0 to 4096, got '-1'\n"},
      {{"--restart-policy=rank", "--standby-workers=4097", kScript},
       "dgt-run: error: --standby-workers must be an integer from 0 to 4096, got '4097'\n"},
      {{"--restart-policy=rank", "--standby-workers=two", kScript},
       "dgt-run: error: --standby-workers must be an integer from 0 to 4096, got 'two'\n"}};
  for (const auto& [args, message] : bad) {
    auto r = Parse(args);
    EXPECT_FALSE(r.options.has_value()) << args[0];
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output, message);
  }
}

// --fork-server on|off (docs/RECOVERY.md "Fork server"): on by default.
TEST(LaunchOptionsTest, ForkServer) {
  auto plain = Parse({kScript});
  ASSERT_TRUE(plain.options.has_value()) << plain.output;
  EXPECT_TRUE(plain.options->fork_server);
  auto off = Parse({"--restart-policy=rank", "--fork_server", "off", kScript});
  ASSERT_TRUE(off.options.has_value()) << off.output;
  EXPECT_FALSE(off.options->fork_server);
  auto on = Parse({"--fork-server=off", "--fork-server=on", kScript});  // The last one wins.
  ASSERT_TRUE(on.options.has_value()) << on.output;
  EXPECT_TRUE(on.options->fork_server);
  auto bad = Parse({"--fork-server=yes", kScript});
  EXPECT_FALSE(bad.options.has_value());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.output, "dgt-run: error: --fork-server must be on or off, got 'yes'\n");
}

}  // namespace
// --hang-timeout and --first-progress-timeout (docs/RECOVERY.md "Hang detection"): seconds, 0 off.
TEST(LaunchOptionsTest, HangTimeouts) {
  auto plain = Parse({kScript});
  ASSERT_TRUE(plain.options.has_value()) << plain.output;
  EXPECT_EQ(plain.options->hang_timeout_s, 0);
  EXPECT_EQ(plain.options->first_progress_timeout_s, 0);
  auto p = Parse({"--hang-timeout=2.5", "--first_progress_timeout", "1800", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->hang_timeout_s, 2.5);
  EXPECT_EQ(p.options->first_progress_timeout_s, 1800);
  auto edges = Parse({"--hang_timeout=0.1", "--first-progress-timeout=0", kScript});
  ASSERT_TRUE(edges.options.has_value()) << edges.output;
  EXPECT_EQ(edges.options->hang_timeout_s, 0.1);
  EXPECT_EQ(edges.options->first_progress_timeout_s, 0);
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--hang-timeout=0.05", kScript},
       "dgt-run: error: --hang-timeout must be 0 (off) or at least 0.1 seconds, got '0.05'\n"},
      {{"--first-progress-timeout=0.001", kScript},
       "dgt-run: error: --first-progress-timeout must be 0 (off) or at least 0.1 seconds, got "
       "'0.001'\n"},
      {{"--hang-timeout=-1", kScript},
       "dgt-run: error: --hang-timeout must be a number of seconds from 0 to 31536000 (a year), "
       "got '-1'\n"},
      {{"--hang-timeout=5m", kScript},
       "dgt-run: error: --hang-timeout must be a number of seconds from 0 to 31536000 (a year), "
       "got '5m'\n"},
      {{"--first-progress-timeout=nan", kScript},
       "dgt-run: error: --first-progress-timeout must be a number of seconds from 0 to 31536000 "
       "(a year), got 'nan'\n"}};
  for (const auto& [args, message] : bad) {
    auto r = Parse(args);
    EXPECT_FALSE(r.options.has_value()) << args[0];
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output, message);
  }
}

}  // namespace dgt::agent
