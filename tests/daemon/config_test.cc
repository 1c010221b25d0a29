#include "daemon/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dgt::daemon {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt-config-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    defaults_.hostname = "host-a";
    defaults_.dgt_run = "/bin/true";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // The error message of parsing `yaml` (with the required endpoint prepended unless `bare`).
  std::string Error(const std::string& yaml, bool bare = false) {
    const std::string text = bare ? yaml : "rendezvous_endpoints: [\"h:1\"]\n" + yaml;
    auto c = ParseAgentConfig(text, "agent.yaml", defaults_);
    EXPECT_FALSE(c.ok()) << yaml;
    if (c.ok()) return "";
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(c.status().message());
  }

  std::string dir_;
  ConfigDefaults defaults_;
};

TEST_F(ConfigTest, DefaultsAndEveryKey) {
  auto c = ParseAgentConfig(
      "rendezvous_endpoints: [\"10.0.0.1:29400\"]\nrun_as_user: root\n"
      "allow_root: true\n",
      "agent.yaml", defaults_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rendezvous_endpoints, std::vector<std::string>{"10.0.0.1:29400"});
  EXPECT_EQ(c->node_name, "host-a");
  EXPECT_EQ(c->advertise_address, "");
  EXPECT_TRUE(c->labels.empty());
  EXPECT_EQ(c->work_dir, "/var/lib/dgt/jobs");
  EXPECT_EQ(c->dgt_run, "/bin/true");
  EXPECT_EQ(c->stop_grace_s, 30);
  EXPECT_FALSE(c->watchdog.has_value());
  EXPECT_TRUE(c->tls.empty());

  const std::string token = Write("token", "s3cret\n");
  auto full = ParseAgentConfig(
      "rendezvous_endpoints: [\"a:1\", \"[::1]:2\"]\nnode_name: gpu-7\n"
      "advertise_address: 10.1.2.3\nlabels: {gpu: a100, zone: \"1\"}\nrun_as_user: root\n"
      "allow_root: yes\nwork_dir: /srv/jobs\ntoken_file: " +
          token + "\ndgt_run: /bin/sh\nstop_grace_s: 2.5\nwatchdog: false\n",
      "agent.yaml", defaults_);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->rendezvous_endpoints, (std::vector<std::string>{"a:1", "[::1]:2"}));
  EXPECT_EQ(full->node_name, "gpu-7");
  EXPECT_EQ(full->advertise_address, "10.1.2.3");
  EXPECT_EQ(full->labels, (std::map<std::string, std::string>{{"gpu", "a100"}, {"zone", "1"}}));
  EXPECT_TRUE(full->allow_root);
  EXPECT_EQ(full->work_dir, "/srv/jobs");
  EXPECT_EQ(full->token_file, token);
  EXPECT_EQ(full->dgt_run, "/bin/sh");
  EXPECT_EQ(full->stop_grace_s, 2.5);
  EXPECT_EQ(full->watchdog, std::optional<bool>(false));
}

TEST_F(ConfigTest, EveryError) {
  const std::string root = "run_as_user: root\nallow_root: true\n";
  EXPECT_EQ(Error("[1, 2]\n", true),
            "agent.yaml: must be a map of keys (rendezvous_endpoints: [...], ...)");
  EXPECT_EQ(Error("a: [1,\n", true).substr(0, 13), "agent.yaml:2:");
  EXPECT_EQ(Error("node_name: x\n", true),
            "agent.yaml: rendezvous_endpoints: is required (a list of \"host:port\")");
  EXPECT_EQ(
      Error("rendezvous_endpoints: []\n", true),
      "agent.yaml: rendezvous_endpoints: must be a non-empty list of \"host:port\", got '[]'");
  EXPECT_EQ(Error("rendezvous_endpoints: [\"h:1\", \"h\"]\n", true),
            "agent.yaml: rendezvous_endpoints[1]: must be host:port with a port in 1..65535 (no "
            "blanks), got 'h'");
  EXPECT_EQ(Error("rendezvous_endpoints: [\"h:99999\"]\n", true),
            "agent.yaml: rendezvous_endpoints[0]: must be host:port with a port in 1..65535 (no "
            "blanks), got 'h:99999'");
  EXPECT_EQ(Error(root + "colour: blue\n"),
            "agent.yaml: colour: unknown key (known: rendezvous_endpoints, node_name, "
            "advertise_address, labels, run_as_user, allow_root, work_dir, tls, token_file, "
            "dgt_run, stop_grace_s, watchdog, health_checks, health_interval_s, "
            "health_check_timeout_s, expected_gpus, min_free_disk, min_shm_size)");
  EXPECT_EQ(Error(root + "node_name: a b\n"),
            "agent.yaml: node_name: may hold only letters, digits, '-', '_' and '.', got 'a b'");
  EXPECT_EQ(Error(root + "node_name: [x]\n"), "agent.yaml: node_name: must be a string, got '[x]'");
  EXPECT_EQ(Error(root + "advertise_address: 10.0.0.1/24\n"),
            "agent.yaml: advertise_address: must be a host name or an IP address (no port), got "
            "'10.0.0.1/24'");
  EXPECT_EQ(Error(root + "labels: [a]\n"),
            "agent.yaml: labels: must be a map of name: value, got '[a]'");
  EXPECT_EQ(Error(root + "labels: {gpu: [a]}\n"),
            "agent.yaml: labels.gpu: must be a string, got '[a]'");
  EXPECT_EQ(Error("run_as_user: no-such-user-dgt\n"),
            "agent.yaml: run_as_user: no such user, got 'no-such-user-dgt'");
  EXPECT_EQ(Error("run_as_user: root\n"),
            "agent.yaml: run_as_user: jobs may not run as root (uid 0) unless allow_root: true "
            "is set, got 'root'");
  EXPECT_EQ(Error("run_as_user: root\nallow_root: maybe\n"),
            "agent.yaml: allow_root: must be true or false, got 'maybe'");
  EXPECT_EQ(Error(root + "watchdog: 3\n"), "agent.yaml: watchdog: must be true or false, got '3'");
  EXPECT_EQ(Error(root + "work_dir: jobs\n"),
            "agent.yaml: work_dir: must be an absolute path, got 'jobs'");
  EXPECT_EQ(Error(root + "dgt_run: /nonexistent/dgt-run\n"),
            "agent.yaml: dgt_run: must be an executable file (dgt-run), got "
            "'/nonexistent/dgt-run'");
  EXPECT_EQ(
      Error(root + "token_file: " + Write("empty", "  \n") + "\n"),
      "agent.yaml: token_file: must be a readable, non-empty token file, got '" + dir_ + "/empty'");
  EXPECT_EQ(Error(root + "tls: {ca_file: /nonexistent/ca.pem}\n"),
            "agent.yaml: tls.ca_file: cannot read the file (No such file or directory), got "
            "'/nonexistent/ca.pem'");
  EXPECT_EQ(Error(root + "tls: {ca: /x}\n"),
            "agent.yaml: tls.ca: unknown key (tls takes ca_file, cert_file, key_file)");
  EXPECT_EQ(Error(root + "tls: {cert_file: " + Write("c.pem", "x") + "}\n"),
            "agent.yaml: tls: cert_file and key_file go together (mutual TLS); one is missing");
  EXPECT_EQ(Error(root + "tls: {ca_file: " + Write("ca.pem", "not pem") + "}\n").substr(0, 16),
            "agent.yaml: tls:");
  EXPECT_EQ(Error(root + "stop_grace_s: 0\n"),
            "agent.yaml: stop_grace_s: must be a number of seconds in (0, 3600], got '0'");
  EXPECT_EQ(Error(root + "stop_grace_s: soon\n"),
            "agent.yaml: stop_grace_s: must be a number of seconds in (0, 3600], got 'soon'");
  EXPECT_EQ(Error(root + "node_name: a\nnode_name: b\n").substr(0, 11), "agent.yaml:");
}

// Values that would fail at run time: each refused, naming the file, the key and the value.
// The health keys take what dgt-run's health flags take, with dgt-run's defaults.
TEST_F(ConfigTest, HealthKeys) {
  const std::string root = "run_as_user: root\nallow_root: true\n";
  auto c = ParseAgentConfig("rendezvous_endpoints: [\"h:1\"]\n" + root, "agent.yaml", defaults_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->health.commands.empty());
  EXPECT_EQ(c->health.interval_s, 60);
  EXPECT_EQ(c->health.check_timeout_s, 60);
  EXPECT_EQ(c->health.expected_gpus, -1);
  EXPECT_EQ(c->health.min_free_disk, 0u);
  EXPECT_EQ(c->health.min_shm_size, uint64_t{64} << 20);

  auto full = ParseAgentConfig("rendezvous_endpoints: [\"h:1\"]\n" + root +
                                   "health_checks: [\"test -e /run/ok\", \"nvidia-smi -L\"]\n"
                                   "health_interval_s: 0.5\nhealth_check_timeout_s: 20\n"
                                   "expected_gpus: 8\nmin_free_disk: 1.5G\nmin_shm_size: 1024\n",
                               "agent.yaml", defaults_);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->health.commands, (std::vector<std::string>{"test -e /run/ok", "nvidia-smi -L"}));
  EXPECT_EQ(full->health.interval_s, 0.5);
  EXPECT_EQ(full->health.check_timeout_s, 20);
  EXPECT_EQ(full->health.expected_gpus, 8);
  EXPECT_EQ(full->health.min_free_disk, uint64_t{3} << 29);
  EXPECT_EQ(full->health.min_shm_size, 1024u);
  auto at_start = ParseAgentConfig(
      "rendezvous_endpoints: [\"h:1\"]\n" + root + "health_interval_s: 0\nexpected_gpus: 0\n",
      "agent.yaml", defaults_);
  ASSERT_TRUE(at_start.ok()) << at_start.status();
  EXPECT_EQ(at_start->health.interval_s, 0);
  EXPECT_EQ(at_start->health.expected_gpus, 0);

  EXPECT_EQ(Error(root + "health_checks: true\n"),
            "agent.yaml: health_checks: must be a list of shell commands, got 'true'");
  EXPECT_EQ(Error(root + "health_checks: [\"true\", \" \"]\n"),
            "agent.yaml: health_checks[1]: must be a command (run with /bin/sh -c), got ' '");
  EXPECT_EQ(Error(root + "health_checks: [[a]]\n"),
            "agent.yaml: health_checks[0]: must be a string, got '[a]'");
  EXPECT_EQ(Error(root + "health_interval_s: 0.05\n"),
            "agent.yaml: health_interval_s: must be 0 (a round only at start) or a number of "
            "seconds from 0.1 to 31536000 (a year), got '0.05'");
  EXPECT_EQ(Error(root + "health_interval_s: -1\n"),
            "agent.yaml: health_interval_s: must be 0 (a round only at start) or a number of "
            "seconds from 0.1 to 31536000 (a year), got '-1'");
  EXPECT_EQ(Error(root + "health_check_timeout_s: 0\n"),
            "agent.yaml: health_check_timeout_s: must be a number of seconds from 0.1 to 31536000 "
            "(a year), got '0'");
  EXPECT_EQ(Error(root + "health_check_timeout_s: .nan\n"),
            "agent.yaml: health_check_timeout_s: must be a number of seconds from 0.1 to 31536000 "
            "(a year), got '.nan'");
  EXPECT_EQ(Error(root + "expected_gpus: 1.5\n"),
            "agent.yaml: expected_gpus: must be an integer from 0 to 4096, got '1.5'");
  EXPECT_EQ(Error(root + "expected_gpus: 4097\n"),
            "agent.yaml: expected_gpus: must be an integer from 0 to 4096, got '4097'");
  EXPECT_EQ(Error(root + "min_free_disk: 1X\n"),
            "agent.yaml: min_free_disk: must be a size (bytes, or with K, M, G, T), at most "
            "1048576T, got '1X'");
  EXPECT_EQ(Error(root + "min_shm_size: [64M]\n"),
            "agent.yaml: min_shm_size: must be a string, got '[64M]'");
}

TEST_F(ConfigTest, RefusesWhatFailsAtRunTime) {
  const std::string root = "run_as_user: root\nallow_root: true\n";
  EXPECT_EQ(Error("rendezvous_endpoints: [\"a:1\", \"b:2\", \"A:1\"]\n", true),
            "agent.yaml: rendezvous_endpoints: 'A:1' is listed twice in 'a:1,b:2,A:1'");
  EXPECT_EQ(Error("rendezvous_endpoints: [\"127.0.0.1:1\", \"localhost:1\"]\n", true),
            "agent.yaml: rendezvous_endpoints: '127.0.0.1:1' and 'localhost:1' are the same "
            "replica (both 127.0.0.1:1); list each replica once");
  EXPECT_EQ(Error("rendezvous_endpoints: [\"127.0.0.1: 42381\"]\n", true),
            "agent.yaml: rendezvous_endpoints[0]: must be host:port with a port in 1..65535 (no "
            "blanks), got '127.0.0.1: 42381'");
  EXPECT_EQ(Error(root + "dgt_run: /tmp\n"),
            "agent.yaml: dgt_run: is a directory; must be an executable file (dgt-run), got "
            "'/tmp'");
  EXPECT_EQ(Error(root + "work_dir: /etc/passwd\n"),
            "agent.yaml: work_dir: exists and is not a directory, got '/etc/passwd'");
  EXPECT_EQ(Error(root + "advertise_address: \"1.2.3.4:5\"\n"),
            "agent.yaml: advertise_address: must be a host name or an IP address without a port "
            "(dgt-run picks the ports of each job), got '1.2.3.4:5'");
  EXPECT_EQ(Error(root + "labels: {\"gpu type\": a100}\n"),
            "agent.yaml: labels: a label name must be 1..253 bytes of letters, digits, '.', '_', "
            "'-' and '/', beginning and ending with a letter or digit, got 'gpu type'");
  EXPECT_EQ(Error(root + "labels: {gpu: \"a\\tb\"}\n"),
            "agent.yaml: labels.gpu: a label value must be printable ASCII, at most 1024 bytes, "
            "got 'a\\tb'");
  EXPECT_EQ(Error(root + "\n[a]: 2\n"), "agent.yaml:5:1: a key must be a string, got '[a]'");
  EXPECT_EQ(Error(root + "labels:\n  {a: 1}: 2\n"),
            "agent.yaml:5:3: labels: a key must be a string, got '{a: 1}'");
  // What stays accepted: an IPv6 advertise address, prefixed label names, a work_dir to create.
  auto ok = ParseAgentConfig(
      "rendezvous_endpoints: [\"127.0.0.1:1\", \"[::1]:1\"]\nadvertise_address: fd00::7\n"
      "labels: {topology.dgt.io/zone: eu-1, gpu: a100}\nwork_dir: " +
          dir_ + "/new/jobs\n" + root,
      "agent.yaml", defaults_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->advertise_address, "fd00::7");
  EXPECT_EQ(ok->labels, (std::map<std::string, std::string>{{"gpu", "a100"},
                                                            {"topology.dgt.io/zone", "eu-1"}}));
}

// dgt-run runs as run_as_user and reads token_file itself: a file only root can read would fail
// every job on the node, so the config is refused naming the file, the user and the errno.
TEST_F(ConfigTest, TokenFileMustBeReadableByRunAsUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (switches to user 'nobody')";
  const std::string token = Write("token", "secret\n");
  ASSERT_EQ(::chmod(token.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string yaml = "run_as_user: nobody\ntoken_file: " + token + "\n";
  EXPECT_EQ(Error(yaml), "agent.yaml: token_file: '" + token +
                             "' is not readable by run_as_user 'nobody' (Permission denied): "
                             "dgt-run runs as that user and reads it");
  ASSERT_EQ(::chmod(token.c_str(), 0644), 0);
  auto c = ParseAgentConfig("rendezvous_endpoints: [\"h:1\"]\n" + yaml, "agent.yaml", defaults_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->token_file, token);
}

TEST_F(ConfigTest, LoadRefusesADirectoryAndAnEndlessFile) {
  auto dir = LoadAgentConfig(dir_, defaults_);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().message(), dir_ + ": is a directory, not a config file");
  // Read up to the limit, not forever (dgt-agent --config /dev/zero --check).
  auto zero = LoadAgentConfig("/dev/zero", defaults_);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "/dev/zero: larger than 1048576 bytes, the limit of a config file");
  // A file of exactly the limit is read (and parsed: a comment is valid YAML but lacks the
  // endpoints).
  const std::string full =
      Write("full.yaml", "#" + std::string(kMaxConfigFileBytes - 2, 'x') + "\n");
  auto at_limit = LoadAgentConfig(full, defaults_);
  ASSERT_FALSE(at_limit.ok());
  EXPECT_THAT(std::string(at_limit.status().message()),
              ::testing::Not(::testing::HasSubstr("limit")));
}

TEST_F(ConfigTest, LoadNamesTheFile) {
  auto missing = LoadAgentConfig(dir_ + "/nope.yaml", defaults_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            dir_ + "/nope.yaml: cannot read the config file (No such file or directory)");
  const std::string path = Write("a.yaml",
                                 "rendezvous_endpoints: [\"h:1\"]\nstop_grace_s: -1\n"
                                 "run_as_user: root\nallow_root: true\n");
  auto bad = LoadAgentConfig(path, defaults_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            path + ": stop_grace_s: must be a number of seconds in (0, 3600], got '-1'");
}

}  // namespace
}  // namespace dgt::daemon
