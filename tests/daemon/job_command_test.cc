#include "daemon/job_command.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::daemon {
namespace {

AgentConfig Config() {
  AgentConfig c;
  c.rendezvous_endpoints = {"10.0.0.9:29400"};
  c.node_name = "node-a";
  c.run_as_user = "dgt";
  c.work_dir = "/var/lib/dgt/jobs";
  c.dgt_run = "/usr/bin/dgt-run";
  return c;
}

RunAsUser User() {
  RunAsUser u;
  u.name = "dgt";
  u.uid = 990;
  u.gid = 990;
  u.home = "/var/lib/dgt";
  u.shell = "/usr/sbin/nologin";
  return u;
}

dgt::jobs::v1::StartJob Start() {
  dgt::jobs::v1::StartJob s;
  s.set_job_id("job-3");
  s.set_rdzv_endpoint("10.0.0.9:29400");
  auto* spec = s.mutable_spec();
  spec->set_command("python train.py --epochs 2");
  spec->set_instance_count(2);
  spec->mutable_distribution()->set_process_count_per_instance(4);
  spec->set_max_restarts(3);
  return s;
}

TEST(JobCommandTest, PytorchArgvEnvAndDirs) {
  auto l = BuildJobLaunch(Config(), Start(), User(),
                          {{"PATH", "/opt/bin:/usr/bin"},
                           {"LANG", "C.UTF-8"},
                           {"NOTIFY_SOCKET", "/run/systemd/notify"},
                           {"WATCHDOG_USEC", "1"}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->argv, (std::vector<std::string>{
                         "/usr/bin/dgt-run", "--nnodes=2", "--nproc-per-node=4",
                         "--rdzv-backend=dgt", "--rdzv-endpoint=10.0.0.9:29400", "--rdzv-id=job-3",
                         "--node-id=node-a", "--max-restarts=3", "--restart-policy=group",
                         "--log-dir", "/var/lib/dgt/jobs/job-3/logs", "--redirects", "3",
                         "--no-python", "--", "/bin/sh", "-c", "python train.py --epochs 2"}));
  EXPECT_EQ(l->env, (std::vector<std::string>{"HOME=/var/lib/dgt", "LANG=C.UTF-8", "LOGNAME=dgt",
                                              "PATH=/opt/bin:/usr/bin", "SHELL=/usr/sbin/nologin",
                                              "USER=dgt"}));
  EXPECT_EQ(l->job_dir, "/var/lib/dgt/jobs/job-3");
  EXPECT_EQ(l->cwd, "/var/lib/dgt/jobs/job-3");
  EXPECT_EQ(l->log_dir, "/var/lib/dgt/jobs/job-3/logs");
  EXPECT_EQ(l->dgt_run_log, "/var/lib/dgt/jobs/job-3/dgt-run.log");
}

TEST(JobCommandTest, TensorflowTlsTokenAddressCodeDirAndJobEnvironment) {
  AgentConfig c = Config();
  c.advertise_address = "10.0.0.5";
  c.tls.ca_file = "/etc/dgt/ca.pem";
  c.tls.cert_file = "/etc/dgt/node.pem";
  c.tls.key_file = "/etc/dgt/node.key";
  c.token_file = "/etc/dgt/token";
  auto s = Start();
  auto* spec = s.mutable_spec();
  spec->mutable_distribution()->set_type("tensorflow");
  spec->mutable_distribution()->set_process_count_per_instance(0);
  spec->mutable_distribution()->set_worker_count(3);
  spec->mutable_distribution()->set_parameter_server_count(1);
  spec->set_restart_policy("rank");
  spec->set_code_dir("/srv/code");
  (*spec->mutable_environment_variables())["PATH"] = "/job/bin";
  (*spec->mutable_environment_variables())["EPOCHS"] = "5";
  auto l = BuildJobLaunch(c, s, User(), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->argv, (std::vector<std::string>{"/usr/bin/dgt-run",
                                               "--nnodes=2",
                                               "--rdzv-backend=dgt",
                                               "--rdzv-endpoint=10.0.0.9:29400",
                                               "--rdzv-id=job-3",
                                               "--node-id=node-a",
                                               "--local-addr=10.0.0.5",
                                               "--max-restarts=3",
                                               "--restart-policy=rank",
                                               "--log-dir",
                                               "/var/lib/dgt/jobs/job-3/logs",
                                               "--redirects",
                                               "3",
                                               "--rdzv-tls-ca=/etc/dgt/ca.pem",
                                               "--rdzv-tls-cert=/etc/dgt/node.pem",
                                               "--rdzv-tls-key=/etc/dgt/node.key",
                                               "--rdzv-token-file=/etc/dgt/token",
                                               "--distribution",
                                               "tensorflow",
                                               "--worker-count",
                                               "3",
                                               "--parameter-server-count",
                                               "1",
                                               "--no-python",
                                               "--",
                                               "/bin/sh",
                                               "-c",
                                               "python train.py --epochs 2"}));
  EXPECT_EQ(l->env,
            (std::vector<std::string>{"EPOCHS=5", "HOME=/var/lib/dgt", "LOGNAME=dgt",
                                      "PATH=/job/bin", "SHELL=/usr/sbin/nologin", "USER=dgt"}));
  EXPECT_EQ(l->cwd, "/srv/code");
}

// agent.yaml's health thresholds reach the job's dgt-run as its flags, so that it checks the node
// as the daemon does; the commands stay with the daemon (they run as root).
TEST(JobCommandTest, HealthThresholdsBecomeDgtRunFlags) {
  AgentConfig c = Config();
  c.health.commands = {"test -e /run/ok"};
  c.health.interval_s = 0.5;
  c.health.check_timeout_s = 5;
  c.health.expected_gpus = 8;
  c.health.min_free_disk = uint64_t{10} << 30;
  c.health.min_shm_size = uint64_t{1} << 20;
  auto l = BuildJobLaunch(c, Start(), User(), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->argv, (std::vector<std::string>{"/usr/bin/dgt-run",
                                               "--nnodes=2",
                                               "--nproc-per-node=4",
                                               "--rdzv-backend=dgt",
                                               "--rdzv-endpoint=10.0.0.9:29400",
                                               "--rdzv-id=job-3",
                                               "--node-id=node-a",
                                               "--max-restarts=3",
                                               "--restart-policy=group",
                                               "--log-dir",
                                               "/var/lib/dgt/jobs/job-3/logs",
                                               "--redirects",
                                               "3",
                                               "--health-interval=0.5",
                                               "--expected-gpus=8",
                                               "--min-free-disk=10737418240",
                                               "--min-shm-size=1048576",
                                               "--no-python",
                                               "--",
                                               "/bin/sh",
                                               "-c",
                                               "python train.py --epochs 2"}));

  c.health.interval_s = 31536000;
  c.health.expected_gpus = 0;
  l = BuildJobLaunch(c, Start(), User(), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->argv[13], "--health-interval=31536000");
  EXPECT_EQ(l->argv[14], "--expected-gpus=0");
}

TEST(JobCommandTest, RefusesBadStarts) {
  auto error = [](dgt::jobs::v1::StartJob s) {
    auto l = BuildJobLaunch(Config(), s, User(), {});
    EXPECT_FALSE(l.ok());
    return l.ok() ? std::string() : std::string(l.status().message());
  };
  auto s = Start();
  s.set_job_id("../etc");
  EXPECT_EQ(error(s), "job id must be 1..64 bytes of [a-z0-9-], got '../etc'");
  s = Start();
  s.set_job_id(std::string(65, 'a'));
  EXPECT_EQ(error(s),
            "job id must be 1..64 bytes of [a-z0-9-], got '" + std::string(65, 'a') + "'");
  s = Start();
  s.mutable_spec()->clear_command();
  EXPECT_EQ(error(s), "job job-3: spec.command is empty");
  s = Start();
  s.mutable_spec()->set_instance_count(0);
  EXPECT_EQ(error(s), "job job-3: instance_count must be >= 1, got 0");
  s = Start();
  s.mutable_spec()->mutable_distribution()->set_process_count_per_instance(0);
  EXPECT_EQ(error(s), "job job-3: distribution.process_count_per_instance must be >= 1, got 0");
  s = Start();
  s.mutable_spec()->mutable_distribution()->set_type("mpi");
  EXPECT_EQ(error(s),
            "job job-3: distribution.type must be pytorch or tensorflow, got 'mpi' "
            "(mpi is not supported by dgt-run)");
  s = Start();
  s.mutable_spec()->set_restart_policy("node");
  EXPECT_EQ(error(s), "job job-3: restart_policy must be group or rank, got 'node'");
  s = Start();
  s.mutable_spec()->set_code_dir("code");
  EXPECT_EQ(error(s), "job job-3: code_dir must be an absolute path, got 'code'");
  s = Start();
  (*s.mutable_spec()->mutable_environment_variables())["1X"] = "v";
  EXPECT_EQ(error(s),
            "job job-3: environment_variables: name must match "
            "[A-Za-z_][A-Za-z0-9_]*, got '1X'");
  s = Start();
  s.clear_rdzv_endpoint();
  EXPECT_EQ(error(s), "job job-3: rdzv_endpoint is empty");
}

TEST(JobCommandTest, RunAsUserLookup) {
  auto root = LookupRunAsUser("root", false);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), absl::StatusCode::kPermissionDenied);
  auto allowed = LookupRunAsUser("root", true);
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(allowed->uid, 0u);
  EXPECT_EQ(allowed->gid, 0u);
  EXPECT_EQ(allowed->home, "/root");
  EXPECT_EQ(LookupRunAsUser("no-such-user-dgt", true).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dgt::daemon
