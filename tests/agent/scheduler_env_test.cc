#include "agent/flags/scheduler_env.h"

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "agent/flags/launch_options.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

// The environment the functions under test read (getenv_fn takes no state).
std::map<std::string, std::string>& Env() {
  static std::map<std::string, std::string> env;
  return env;
}
const char* FakeGetenv(const char* name) {
  auto it = Env().find(name);
  return it == Env().end() ? nullptr : it->second.c_str();
}
std::string& Fqdn() {
  static std::string fqdn;
  return fqdn;
}
std::string FakeFqdn() { return Fqdn(); }

std::string MakeScript() {
  std::string path = ::testing::TempDir() + "dgt_scheduler_env_test_script.py";
  std::ofstream(path) << "print('hi')\n";
  return path;
}
const std::string kScript = MakeScript();

// What srun exports to each task of `srun -N2 --ntasks-per-node=1` in job 4242, step 0, as the
// task on the second node sees it.
void SrunTwoNodes() {
  Env() = {{"SLURM_JOB_ID", "4242"},
           {"SLURM_STEP_ID", "0"},
           {"SLURM_JOB_NUM_NODES", "2"},
           {"SLURM_NNODES", "2"},
           {"SLURM_STEP_NUM_NODES", "2"},
           {"SLURM_NODEID", "1"},
           {"SLURM_JOB_NODELIST", "gpu[07-08]"},
           {"SLURM_STEP_NODELIST", "gpu[07-08]"},
           {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
           {"SLURM_STEP_NUM_TASKS", "2"}};
  Fqdn() = "";
}

ParsedCommandLine Parse(const std::vector<std::string>& args) {
  return ParseDgtRunCommandLine(args, FakeGetenv, FakeFqdn);
}

TEST(SchedulerEnvTest, NoScheduler) {
  Env() = {};
  auto d = ReadSchedulerDefaults(FakeGetenv, FakeFqdn);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scheduler, Scheduler::kNone);
  EXPECT_FALSE(d->nnodes.has_value());
  EXPECT_FALSE(d->node_rank.has_value());
  auto p = Parse({"--standalone", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->setting_sources, "");
}

TEST(SchedulerEnvTest, SlurmPortRange) {
  EXPECT_EQ(SlurmMasterPort(0), 15000);
  EXPECT_EQ(SlurmMasterPort(4242), 19242);
  EXPECT_EQ(SlurmMasterPort(123459999), 24999);
  EXPECT_EQ(SlurmMasterPort(10000), 15000);
}

TEST(SchedulerEnvTest, SlurmSrunTwoNodes) {
  SrunTwoNodes();
  auto d = ReadSchedulerDefaults(FakeGetenv, FakeFqdn);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->scheduler, Scheduler::kSlurm);
  EXPECT_EQ(d->nnodes->value, "2");
  EXPECT_EQ(d->nnodes->source, "SLURM_STEP_NUM_NODES");
  EXPECT_EQ(d->node_rank->value, "1");
  EXPECT_EQ(d->master_addr->value, "gpu07");
  EXPECT_EQ(d->master_addr->source, "SLURM_STEP_NODELIST (its first host)");
  EXPECT_EQ(d->master_port->value, "19242");
  EXPECT_EQ(d->run_id->value, "4242.0");
  EXPECT_FALSE(d->nproc_per_node.has_value());

  auto p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "gpu07");
  EXPECT_EQ(o.master_port, 19242);
  EXPECT_TRUE(o.master_port_set);
  EXPECT_EQ(o.run_id, "4242.0");
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.setting_sources,
            "nnodes=2 (SLURM_STEP_NUM_NODES), node-rank=1 (SLURM_NODEID), master-addr=gpu07 "
            "(SLURM_STEP_NODELIST (its first host)), master-port=19242 (SLURM_JOB_ID), "
            "rdzv-id=4242.0 (SLURM_JOB_ID.SLURM_STEP_ID)");
}

TEST(SchedulerEnvTest, SlurmStepNodelistWinsAndGpus) {
  SrunTwoNodes();
  Env()["SLURM_JOB_NODELIST"] = "login1,gpu[07-09]";
  Env()["SLURM_JOB_NUM_NODES"] = "4";
  Env()["SLURM_GPUS_ON_NODE"] = "8";
  auto p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->master_addr, "gpu07");
  EXPECT_EQ(p.options->max_nodes, 2);
  EXPECT_EQ(p.options->nproc_per_node, 8);
  // Without the step's variables, the job's.
  Env().erase("SLURM_STEP_NODELIST");
  Env().erase("SLURM_STEP_NUM_NODES");
  Env().erase("SLURM_NNODES");
  Env()["SLURM_NODEID"] = "3";
  Env()["SLURM_STEP_TASKS_PER_NODE"] = "1(x4)";
  p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->master_addr, "login1");
  EXPECT_EQ(p.options->max_nodes, 4);
  EXPECT_EQ(p.options->node_rank, 3);
}

TEST(SchedulerEnvTest, FlagsAndPetWinOverSlurm) {
  SrunTwoNodes();
  Env()["PET_MASTER_PORT"] = "29501";
  auto p = Parse({"--nnodes=3", "--node-rank=2", "--master-addr=10.0.0.9", "--rdzv-id=mine",
                  "--nproc-per-node=2", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.9");
  EXPECT_EQ(o.master_port, 29501);
  EXPECT_EQ(o.run_id, "mine");
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.setting_sources,
            "nnodes=3 (--nnodes; SLURM_STEP_NUM_NODES gives 2, not used), node-rank=2 "
            "(--node-rank; SLURM_NODEID gives 1, not used), master-addr=10.0.0.9 (--master-addr; "
            "SLURM_STEP_NODELIST (its first host) gives gpu07, not used), master-port=29501 "
            "(PET_MASTER_PORT; SLURM_JOB_ID gives 19242, not used), rdzv-id=mine (--rdzv-id; "
            "SLURM_JOB_ID.SLURM_STEP_ID gives 4242.0, not used), nproc-per-node=2 "
            "(--nproc-per-node)");
}

TEST(SchedulerEnvTest, RendezvousFormTakesOnlyCounts) {
  SrunTwoNodes();
  auto p = Parse({"--rdzv-backend=dgt", "--rdzv-endpoint=10.0.0.1:29400", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_nodes, 2);
  EXPECT_EQ(p.options->run_id, "4242.0");
  EXPECT_EQ(p.options->node_rank, -1);
  EXPECT_EQ(p.options->master_addr, "127.0.0.1");
}

TEST(SchedulerEnvTest, StandaloneIgnoresSlurm) {
  SrunTwoNodes();
  Env()["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  auto p = Parse({"--standalone", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_nodes, 1);
  EXPECT_EQ(p.options->setting_sources, "");
}

TEST(SchedulerEnvTest, SeveralTasksPerNodeRefused) {
  SrunTwoNodes();
  Env()["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  auto p = Parse({kScript});
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: srun started 4 tasks on this node (SLURM_STEP_TASKS_PER_NODE=4(x2)), "
            "so 4 dgt-run agents would each start their own workers; dgt-run starts a node's "
            "workers itself: run one task per node, e.g. srun --ntasks-per-node=1 dgt-run "
            "--nproc-per-node=4 train.py\n");
  // Only the task count: the same as srun -n8 -N2 gives it.
  Env().erase("SLURM_STEP_TASKS_PER_NODE");
  Env()["SLURM_STEP_NUM_TASKS"] = "8";
  p = Parse({kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: srun started 4 tasks on this node (SLURM_STEP_NUM_TASKS=8 on 2 "
            "node(s)), so 4 dgt-run agents would each start their own workers; dgt-run starts a "
            "node's workers itself: run one task per node, e.g. srun --ntasks-per-node=1 dgt-run "
            "--nproc-per-node=4 train.py\n");
  // Uneven: only this node's count matters (node 1 has one task).
  Env().erase("SLURM_STEP_NUM_TASKS");
  Env()["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
}

TEST(SchedulerEnvTest, MissingNodeIdNamesTheFix) {
  SrunTwoNodes();
  Env().erase("SLURM_NODEID");
  auto p = Parse({kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: SLURM_NODEID is not set, but SLURM_JOB_ID=4242 and "
            "SLURM_STEP_NUM_NODES=2: start dgt-run under srun with one task per node (srun "
            "--ntasks-per-node=1 dgt-run ...), or pass --node-rank\n");
  // A flag makes it moot.
  p = Parse({"--node-rank=1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->node_rank, 1);
}

TEST(SchedulerEnvTest, BadSlurmValuesNameTheVariable) {
  SrunTwoNodes();
  Env()["SLURM_STEP_NODELIST"] = "gpu[07-";
  auto p = Parse({kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: SLURM_STEP_NODELIST='gpu[07-' is not a Slurm hostlist: '[' without "
            "']'\n");
  p = Parse({"--master-addr=10.0.0.1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;

  SrunTwoNodes();
  Env()["SLURM_NODEID"] = "2";
  p = Parse({kScript});
  EXPECT_EQ(p.output, "dgt-run: error: SLURM_NODEID=2 is not below SLURM_STEP_NUM_NODES=2\n");
  Env()["SLURM_NODEID"] = "-1";
  p = Parse({kScript});
  EXPECT_EQ(p.output,
            "dgt-run: error: SLURM_NODEID must be an integer from 0 to 1000000, got '-1'\n");

  SrunTwoNodes();
  Env()["SLURM_STEP_NUM_NODES"] = "two";
  p = Parse({kScript});
  EXPECT_EQ(p.output,
            "dgt-run: error: SLURM_STEP_NUM_NODES must be an integer from 1 to 1000000, got "
            "'two'\n");
}

TEST(SchedulerEnvTest, SlurmBatchScriptOfSeveralNodes) {
  // What sbatch -N2 gives its batch script (Slurm 22.05): no step, the first node.
  Env() = {{"SLURM_JOB_ID", "2"},
           {"SLURM_JOB_NUM_NODES", "2"},
           {"SLURM_NNODES", "2"},
           {"SLURM_NODEID", "0"},
           {"SLURM_TASKS_PER_NODE", "2(x2)"},
           {"SLURM_JOB_NODELIST", "node[1-2]"}};
  auto p = Parse({kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: dgt-run is not in a job step (SLURM_JOB_ID=2 without SLURM_STEP_ID: "
            "the batch script or salloc's shell) of SLURM_NNODES=2 nodes, so it alone would wait "
            "for the others: start one per node with srun --ntasks-per-node=1 dgt-run ..., or "
            "pass --nnodes\n");
  p = Parse({"--nnodes=1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_nodes, 1);
}

TEST(SchedulerEnvTest, SlurmOneNodeOutsideAStep) {
  // sbatch's batch script on a one-node allocation: no step, no task count.
  Env() = {{"SLURM_JOB_ID", "77"},
           {"SLURM_JOB_NUM_NODES", "1"},
           {"SLURM_NODEID", "0"},
           {"SLURM_JOB_NODELIST", "n1"}};
  auto p = Parse({"--nproc-per-node=2", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_nodes, 1);
  EXPECT_EQ(p.options->run_id, "77");
  // One node hosts its own store: no master address or port to agree on.
  EXPECT_FALSE(p.options->master_port_set);
  EXPECT_EQ(p.options->master_addr, "127.0.0.1");
  EXPECT_TRUE(p.options->warnings.empty());
  EXPECT_EQ(p.options->setting_sources,
            "nnodes=1 (SLURM_JOB_NUM_NODES), rdzv-id=77 (SLURM_JOB_ID), nproc-per-node=2 "
            "(--nproc-per-node)");
}

TEST(SchedulerEnvTest, KubernetesIndexZeroName) {
  auto n = KubernetesIndexZeroName("train-3.train.ml.svc.cluster.local", 3, std::nullopt);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, "train-0.train.ml.svc.cluster.local");
  n = KubernetesIndexZeroName("js-workers-2-1.js.default.svc.cluster.local", 1, 2);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, "js-workers-0-0.js.default.svc.cluster.local");
  n = KubernetesIndexZeroName("job-10-0.svc", 0, std::nullopt);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, "job-10-0.svc");
  n = KubernetesIndexZeroName("train-3", 3, std::nullopt);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(),
            "cannot name index 0: this pod's name 'train-3' has no domain; set the pod's "
            "subdomain to a headless Service (docs/SCHEDULERS.md), or pass --master-addr");
  n = KubernetesIndexZeroName("train-4.svc", 3, std::nullopt);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(),
            "cannot name index 0: this pod's name 'train-4.svc' does not end with its completion "
            "index '-3'; set the pod's subdomain to a headless Service (docs/SCHEDULERS.md), or "
            "pass --master-addr");
  n = KubernetesIndexZeroName("-3.svc", 3, std::nullopt);
  EXPECT_FALSE(n.ok());
}

TEST(SchedulerEnvTest, KubernetesIndexedJob) {
  Env() = {{"JOB_COMPLETION_INDEX", "2"}};
  Fqdn() = "train-2.train-svc.default.svc.cluster.local";
  auto p = Parse({"--nnodes=4", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  const LaunchOptions& o = *p.options;
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "train-0.train-svc.default.svc.cluster.local");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.setting_sources,
            "nnodes=4 (--nnodes), node-rank=2 (JOB_COMPLETION_INDEX), "
            "master-addr=train-0.train-svc.default.svc.cluster.local (the pod's DNS name, index "
            "0)");
  // PET_* (Kubeflow's TrainJob sets them) wins.
  Env()["PET_NODE_RANK"] = "1";
  Env()["PET_MASTER_ADDR"] = "leader.svc";
  p = Parse({"--nnodes=4", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->node_rank, 1);
  EXPECT_EQ(p.options->master_addr, "leader.svc");
  // Without --nnodes each pod runs a job of its own: allowed (a sweep), with a warning.
  Env() = {{"JOB_COMPLETION_INDEX", "2"}};
  p = Parse({kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->max_nodes, 1);
  EXPECT_EQ(p.options->node_rank, -1);
  EXPECT_EQ(p.options->warnings,
            (std::vector<std::string>{
                "JOB_COMPLETION_INDEX is set but --nnodes is not: this pod runs a one-node job "
                "of its own; give --nnodes (the Job's completions) for one job across the pods, "
                "or --nnodes=1 to say so"}));
  p = Parse({"--nnodes=1", kScript});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_TRUE(p.options->warnings.empty());
  // No subdomain: the master cannot be named.
  Env() = {{"JOB_COMPLETION_INDEX", "2"}};
  Fqdn() = "train-2";
  p = Parse({"--nnodes=4", kScript});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.output,
            "dgt-run: error: cannot name index 0: this pod's name 'train-2' has no domain; set "
            "the pod's subdomain to a headless Service (docs/SCHEDULERS.md), or pass "
            "--master-addr\n");
}

TEST(SchedulerEnvTest, KubernetesJobSet) {
  // replicas 2, parallelism 2: job 1's second pod is node rank 3.
  Env() = {{"JOB_COMPLETION_INDEX", "1"},
           {"DGT_JOBSET_JOB_INDEX", "1"},
           {"DGT_JOBSET_PODS_PER_JOB", "2"}};
  Fqdn() = "js-node-1-1.js.default.svc.cluster.local";
  auto d = ReadSchedulerDefaults(FakeGetenv, FakeFqdn);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scheduler, Scheduler::kKubernetes);
  EXPECT_EQ(d->node_rank->value, "3");
  EXPECT_EQ(d->master_addr->value, "js-node-0-0.js.default.svc.cluster.local");
  // replicas N, parallelism 1.
  Env() = {{"JOB_COMPLETION_INDEX", "0"}, {"DGT_JOBSET_JOB_INDEX", "5"}};
  Fqdn() = "js-node-5-0.js";
  d = ReadSchedulerDefaults(FakeGetenv, FakeFqdn);
  EXPECT_EQ(d->node_rank->value, "5");
  EXPECT_EQ(d->master_addr->value, "js-node-0-0.js");
  // Several pods per job without DGT_JOBSET_PODS_PER_JOB would collide.
  Env() = {{"JOB_COMPLETION_INDEX", "1"}, {"DGT_JOBSET_JOB_INDEX", "1"}};
  Fqdn() = "js-node-1-1.js";
  d = ReadSchedulerDefaults(FakeGetenv, FakeFqdn);
  EXPECT_EQ(d->node_rank->error,
            "JOB_COMPLETION_INDEX=1 is not below DGT_JOBSET_PODS_PER_JOB=1 in JobSet job 1: set "
            "DGT_JOBSET_PODS_PER_JOB to the child Job's parallelism");
}

}  // namespace
}  // namespace dgt::agent
