#include "jobs/scheduler.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dgt::jobs {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// "node start job" / "node cancel job grace" / "node registered".
std::vector<std::string> Describe(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) {
    if (a.message.has_start()) {
      out.push_back(absl::StrCat(a.node, " start ", a.message.start().job_id(), " ",
                                 a.message.start().rdzv_endpoint()));
    } else if (a.message.has_cancel()) {
      out.push_back(absl::StrCat(a.node, " cancel ", a.message.cancel().job_id(), " ",
                                 a.message.cancel().grace_s()));
    } else {
      out.push_back(absl::StrCat(a.node, " ", a.message.DebugString()));
    }
  }
  return out;
}

v1::JobSpec Spec(int nodes, int per_node, const std::map<std::string, std::string>& labels = {}) {
  v1::JobSpec spec;
  spec.set_command("python train.py");
  spec.set_instance_count(nodes);
  spec.mutable_distribution()->set_process_count_per_instance(per_node);
  for (const auto& [k, v] : labels) (*spec.mutable_node_labels())[k] = v;
  return spec;
}

v1::NodeHello Hello(const std::string& name, const std::map<std::string, std::string>& labels = {},
                    const std::vector<std::string>& running = {}) {
  v1::NodeHello hello;
  hello.set_node_name(name);
  hello.set_hostname(name + ".example");
  for (const auto& [k, v] : labels) (*hello.mutable_labels())[k] = v;
  for (const auto& id : running) hello.add_running_job_ids(id);
  return hello;
}

v1::JobUpdate Update(const std::string& job, v1::JobEvent event, int code = 0,
                     const std::string& message = "") {
  v1::JobUpdate u;
  u.set_job_id(job);
  u.set_event(event);
  u.set_exit_code(code);
  u.set_message(message);
  return u;
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : s_(SchedulerOptions{"rdzv:29400", 30}) {}

  std::vector<std::string> Submit(const v1::JobSpec& spec, std::string* id = nullptr) {
    std::vector<Action> out;
    auto got = s_.Submit(spec, now_, &out);
    EXPECT_TRUE(got.ok()) << got.status();
    if (id != nullptr && got.ok()) *id = *got;
    return Describe(out);
  }
  std::vector<std::string> Register(const v1::NodeHello& hello) {
    std::vector<Action> out;
    absl::Status s = s_.Register(hello, now_, &out);
    EXPECT_TRUE(s.ok()) << s;
    return Describe(out);
  }
  std::vector<std::string> Update(const std::string& node, const v1::JobUpdate& u) {
    std::vector<Action> out;
    absl::Status s = s_.OnUpdate(node, u, now_, &out);
    EXPECT_TRUE(s.ok()) << s;
    return Describe(out);
  }
  std::vector<std::string> Deregister(const std::string& node) {
    std::vector<Action> out;
    s_.Deregister(node, now_, &out);
    return Describe(out);
  }
  std::vector<std::string> SetHealth(const std::string& node, bool unhealthy,
                                     const std::string& reason = "") {
    std::vector<Action> out;
    s_.SetHealth(node, unhealthy, reason, now_, &out);
    return Describe(out);
  }
  std::vector<std::string> Tick() {
    std::vector<Action> out;
    s_.Tick(now_, &out);
    return Describe(out);
  }
  // The run of `id` with node `ranks[i]` at node rank i, after `restarts` restarts.
  void RunStatus(const std::string& id, const std::vector<std::string>& ranks, int restarts = 0) {
    rendezvous::RunStatus run;
    run.run_id = id;
    run.round = restarts;
    run.restart_count = restarts;
    for (size_t i = 0; i < ranks.size(); ++i) {
      rendezvous::NodeStatus& node = run.nodes.emplace_back();
      node.node_id = ranks[i];
      node.node_rank = static_cast<int32_t>(i);
    }
    s_.OnRunStatus(run, now_);
  }
  // Nodes "a" and "b" registered, `spec` submitted (placed on both) and started on both; its id.
  std::string RunningOnAB(const v1::JobSpec& spec) {
    Register(Hello("a"));
    Register(Hello("b"));
    std::string id;
    Submit(spec, &id);
    Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
    Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED));
    return id;
  }
  // Nodes "a", "b" and "c" registered; a 2-node job with 1 spare and `max_restarts` started on
  // all three, its run at node ranks a, b (c waits as the spare); its id.
  std::string RunningWithASpare(int max_restarts = 0) {
    v1::JobSpec spec = Spec(2, 1);
    spec.set_spare_instances(1);
    spec.set_max_restarts(max_restarts);
    Register(Hello("a"));
    Register(Hello("b"));
    Register(Hello("c"));
    std::string id;
    Submit(spec, &id);
    for (const char* n : {"a", "b", "c"}) Update(n, jobs::Update(id, v1::JOB_EVENT_STARTED));
    RunStatus(id, {"a", "b"});
    return id;
  }
  const v1::JobInfo& Job(const std::string& id) { return *s_.FindJob(id); }
  std::vector<std::string> NodeStates() {
    std::vector<std::string> out;
    for (const v1::NodeInfo& n : s_.Nodes()) {
      out.push_back(
          absl::StrCat(n.node_name(), " ", n.state(), n.job_id().empty() ? "" : " ", n.job_id()));
    }
    return out;
  }
  std::vector<std::string> JobNodes(const std::string& id) {
    std::vector<std::string> out;
    for (const v1::JobNode& n : Job(id).nodes()) {
      out.push_back(absl::StrCat(n.node_name(), " rank ", n.node_rank(), " first ", n.first_rank(),
                                 " exit ", n.exit_code()));
    }
    return out;
  }

  absl::Time now_ = kT0;
  Scheduler s_;
};

TEST_F(SchedulerTest, QueuedUntilEnoughNodesThenStartsOnEach) {
  std::string id;
  EXPECT_THAT(Submit(Spec(2, 2), &id), IsEmpty());
  EXPECT_EQ(id, "job-1");
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(id).reason(), "needs 2 idle nodes; 0 match");
  EXPECT_EQ(Job(id).submitted_unix_s(), 1000);
  EXPECT_THAT(Register(Hello("b")), IsEmpty());
  EXPECT_EQ(Job(id).reason(), "needs 2 idle nodes; 1 matches");
  now_ += absl::Seconds(5);
  EXPECT_THAT(Register(Hello("a")),
              ElementsAre("a start job-1 rdzv:29400", "b start job-1 rdzv:29400"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  EXPECT_EQ(Job(id).reason(), "");
  EXPECT_EQ(Job(id).started_unix_s(), 1005);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  EXPECT_THAT(JobNodes(id),
              ElementsAre("a rank -1 first -1 exit -1", "b rank -1 first -1 exit -1"));
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  // The run: b got node rank 0, a node rank 1 after a restart.
  rendezvous::RunStatus run;
  run.run_id = id;
  run.round = 1;
  run.restart_count = 1;
  run.nodes.resize(2);
  run.nodes[0].node_id = "b";
  run.nodes[0].node_rank = 0;
  run.nodes[1].node_id = "a";
  run.nodes[1].node_rank = 1;
  s_.OnRunStatus(run, now_);
  EXPECT_EQ(Job(id).restarts(), 1);
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 1 first 2 exit -1", "b rank 0 first 0 exit -1"));
  auto target = s_.LogTargetFor(id, 3);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(target->node, "a");
  EXPECT_EQ(target->local_rank, 1);
  EXPECT_EQ(s_.LogTargetFor(id, 4).status().message(), "job 'job-1' has no rank 4 (ranks: 0 to 3)");
  now_ += absl::Seconds(10);
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(NodeStates(), ElementsAre("a idle", "b busy job-1"));
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Job(id).finished_unix_s(), 1015);
  EXPECT_THAT(NodeStates(), ElementsAre("a idle", "b idle"));
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 1 first 2 exit 0", "b rank 0 first 0 exit 0"));
}

TEST_F(SchedulerTest, FifoBlocksBehindTheFirstUnplacedJobAndLabelsMatter) {
  Register(Hello("a", {{"gpu", "a100"}}));
  Register(Hello("b", {{"gpu", "h100"}}));
  std::string j1, j2, j3;
  EXPECT_THAT(Submit(Spec(2, 1, {{"gpu", "a100"}}), &j1), IsEmpty());
  EXPECT_EQ(Job(j1).reason(), "needs 2 idle nodes with labels {gpu=a100}; 1 matches");
  // j2 fits on b alone, but waits behind j1: no starvation of the large job.
  EXPECT_THAT(Submit(Spec(1, 1), &j2), IsEmpty());
  EXPECT_EQ(Job(j2).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(j2).reason(), "waiting behind job-1 (first in, first out)");
  EXPECT_THAT(Register(Hello("c", {{"gpu", "a100"}, {"zone", "x"}})),
              ElementsAre("a start job-1 rdzv:29400", "c start job-1 rdzv:29400",
                          "b start job-2 rdzv:29400"));
  EXPECT_EQ(Job(j2).state(), v1::JOB_STATE_STARTING);
  EXPECT_THAT(Submit(Spec(1, 1), &j3), IsEmpty());
  EXPECT_EQ(Job(j3).reason(), "needs 1 idle node; 0 match");
  EXPECT_THAT(Update("b", jobs::Update(j2, v1::JOB_EVENT_EXITED, 0)),
              ElementsAre("b start job-3 rdzv:29400"));
  EXPECT_EQ(Job(j2).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, FailureReasonIsTheFirstFailureOrTheRunsOutcome) {
  std::string id = RunningOnAB(Spec(2, 1));
  // max_restarts 0: b's failure ends the job at once and stops a (it would wait for b).
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 3, "rank 1 exited with code 3")),
              ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "node b: dgt-run exited with code 3: rank 1 exited with code 3");
  EXPECT_EQ(Job(id).finished_unix_s(), 1000);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle"));
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 1, "the run failed"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "node b: dgt-run exited with code 3: rank 1 exited with code 3");
  EXPECT_THAT(NodeStates(), ElementsAre("a idle", "b idle"));

  // With the run's outcome known, that is the root cause.
  std::string id2;
  Submit(Spec(2, 1), &id2);
  rendezvous::RunStatus run;
  run.run_id = id2;
  run.round = 0;
  run.outcome = "failed: rank 0 (node a) exited with code 7";
  s_.OnRunStatus(run, now_);
  EXPECT_EQ(Job(id2).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Update("a", jobs::Update(id2, v1::JOB_EVENT_EXITED, 7)),
              ElementsAre("b cancel job-2 30"));
  EXPECT_EQ(Job(id2).state(), v1::JOB_STATE_FAILED);
  Update("b", jobs::Update(id2, v1::JOB_EVENT_EXITED, 1));
  EXPECT_EQ(Job(id2).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id2).reason(), "rank 0 (node a) exited with code 7");
}

TEST_F(SchedulerTest, ANodeWhoseDgtRunLeftAnOpenRunIsReplacedWithRestartsLeft) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  std::string id = RunningOnAB(spec);
  // b's dgt-run was killed while the run went on: nothing would start that part again, and a's
  // dgt-run would wait out its join timeout. b is idle again: the part starts there.
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 137, "killed by SIGKILL")),
              ElementsAre("b start job-1 rdzv:29400"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(),
            "node b: its dgt-run left the run, which goes on (dgt-run exited with code 137: "
            "killed by SIGKILL); replacing it (restart 1 of 1)");
  EXPECT_EQ(Job(id).node_replacements(), 1);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  EXPECT_THAT(JobNodes(id),
              ElementsAre("a rank -1 first -1 exit -1", "b rank -1 first -1 exit -1"));
  // A second such exit: no restart left, the job fails at once and a is stopped.
  Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED));
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 143)),
              ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "node b: dgt-run exited with code 143");
}

TEST_F(SchedulerTest, ADrainedNodesPartGoesToAnIdleNode) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  std::string id = RunningOnAB(spec);
  Register(Hello("c"));
  std::vector<Action> out;
  s_.Drain("b", now_, &out);
  EXPECT_THAT(Describe(out), IsEmpty());
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 143,
                                       "dgt-run: error: stopped by SIGTERM")),
              ElementsAre("c start job-1 rdzv:29400"));
  EXPECT_EQ(Job(id).reason(),
            "node b: it drained: dgt-run exited with code 143: dgt-run: error: stopped by SIGTERM; "
            "replacing it (restart 1 of 2)");
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b draining", "c busy job-1"));
  EXPECT_THAT(JobNodes(id),
              ElementsAre("a rank -1 first -1 exit -1", "c rank -1 first -1 exit -1"));
  Update("c", jobs::Update(id, v1::JOB_EVENT_STARTED));
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  Update("c", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(NodeStates(), ElementsAre("a idle", "b draining", "c idle"));
}

TEST_F(SchedulerTest, ADrainWithNoRestartsLeftFailsTheJobNamingTheDrain) {
  std::string id = RunningOnAB(Spec(2, 1));
  std::vector<Action> out;
  s_.Drain("b", now_, &out);
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 143,
                                       "dgt-run: error: stopped by SIGTERM")),
              ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node b: it drained: dgt-run exited with code 143: dgt-run: error: stopped by SIGTERM");
}

TEST_F(SchedulerTest, AnExitAfterTheRunClosedEndsTheJobWithoutAReplacement) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(3);
  std::string id = RunningOnAB(spec);
  rendezvous::RunStatus run;
  run.run_id = id;
  run.round = 0;
  run.outcome = "failed: rank 1 (node b) exited with code 2";
  s_.OnRunStatus(run, now_);
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 1)), IsEmpty());
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 1)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "rank 1 (node b) exited with code 2");
  EXPECT_EQ(Job(id).node_replacements(), 0);
}

TEST_F(SchedulerTest, ANodeThatCannotStartCancelsTheOthers) {
  Register(Hello("a"));
  Register(Hello("b"));
  Register(Hello("c"));
  std::string id;
  Submit(Spec(3, 1), &id);
  Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 1, "code_dir /x does not exist")),
              ElementsAre("a cancel job-1 30", "c cancel job-1 30"));
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 143));
  Update("c", jobs::Update(id, v1::JOB_EVENT_EXITED, 143));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "node b: dgt-run exited with code 1: code_dir /x does not exist");
  // Its final poll finds no run: its ranks were never given.
  rendezvous::RunStatus run;
  run.run_id = id;
  s_.OnRunStatus(run, now_);
  EXPECT_EQ(s_.LogTargetFor(id, 0).status().message(),
            "job 'job-1' rank 0 was never given to a node: its run formed no round with it");
}

TEST_F(SchedulerTest, CancelQueuedRunningAndFinished) {
  Register(Hello("a"));
  std::string running, queued;
  Submit(Spec(1, 1), &running);
  Submit(Spec(1, 1), &queued);
  std::vector<Action> out;
  now_ += absl::Seconds(2);
  auto q = s_.Cancel(queued, 0, now_, &out);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(q->reason(), "cancelled before it started");
  EXPECT_EQ(q->finished_unix_s(), 1002);
  EXPECT_THAT(Describe(out), IsEmpty());
  // It never ran: no ranks, said so (not the ranks it would have had).
  EXPECT_EQ(s_.LogTargetFor(queued, 0).status().message(),
            "job 'job-2' has no rank 0 (it never started)");
  auto r = s_.Cancel(running, 5, now_, &out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(r->finished_unix_s(), 0);
  EXPECT_THAT(Describe(out), ElementsAre("a cancel job-1 5"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1"));
  EXPECT_THAT(Update("a", jobs::Update(running, v1::JOB_EVENT_EXITED, 143)), IsEmpty());
  EXPECT_EQ(Job(running).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(running).finished_unix_s(), 1002);
  EXPECT_THAT(NodeStates(), ElementsAre("a idle"));
  auto again = s_.Cancel(running, 0, now_, &out);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(), "job 'job-1' already finished: cancelled");
  EXPECT_EQ(s_.Cancel("job-9", 0, now_, &out).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, NodeLostMidJobAndBack) {
  std::string id = RunningOnAB(Spec(2, 1));
  // b's stream breaks: the job stays running (dgt-run's rendezvous decides what happens).
  EXPECT_THAT(Deregister("b"), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1"));
  // It comes back still running the job, within the grace: it keeps it, even after the grace.
  now_ += absl::Seconds(9);
  EXPECT_THAT(Register(Hello("b", {}, {id})), IsEmpty());
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  now_ += absl::Seconds(30);
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(), "");
  // A second daemon with b's name is refused.
  std::vector<Action> out;
  EXPECT_EQ(s_.Register(Hello("b"), now_, &out).code(), absl::StatusCode::kAlreadyExists);
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, KilledDaemonBackWithoutTheJobFailsItAtOnceWithoutRestarts) {
  std::string id = RunningOnAB(Spec(2, 1));  // max_restarts 0.
  EXPECT_THAT(Deregister("b"), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);  // b may still come back with it.
  now_ += absl::Seconds(2);
  // b's daemon was killed (its dgt-run died with it) and restarted: it lists no job.
  EXPECT_THAT(Register(Hello("b")), ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (it registered again without the job); "
            "max_restarts 0");
  EXPECT_EQ(Job(id).finished_unix_s(), 1002);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle"));
  // a's dgt-run ends on the CancelJob: a is free, the job's end stays.
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 143)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).finished_unix_s(), 1002);
  EXPECT_THAT(NodeStates(), ElementsAre("a idle", "b idle"));
  now_ += absl::Seconds(30);
  EXPECT_THAT(Tick(), IsEmpty());
  // A node that lists a finished job is told to stop it.
  Deregister("a");
  EXPECT_THAT(Register(Hello("a", {}, {id, "job-77"})),
              ElementsAre("a cancel job-1 30", "a cancel job-77 30"));
}

TEST_F(SchedulerTest, LostNodeNotBackWithinTheGraceFailsTheJob) {
  Register(Hello("a"));
  Register(Hello("b"));
  std::string id;
  Submit(Spec(2, 1), &id);
  Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
  Deregister("b");  // While the job is still starting.
  now_ += absl::Milliseconds(9999);
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_STARTING);
  now_ += absl::Milliseconds(1);
  EXPECT_THAT(Tick(), ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "max_restarts 0");
  EXPECT_EQ(Job(id).finished_unix_s(), 1010);
  EXPECT_THAT(Tick(), IsEmpty());
  // b back later, without the job: nothing more for it to do.
  EXPECT_THAT(Register(Hello("b")), IsEmpty());
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle"));
}

TEST_F(SchedulerTest, ASpareInstanceIsPlacedWithTheJobAndCountedInThePendingReason) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_spare_instances(1);
  Register(Hello("a"));
  Register(Hello("b"));
  std::string id;
  EXPECT_THAT(Submit(spec, &id), IsEmpty());
  EXPECT_EQ(Job(id).reason(), "needs 3 idle nodes (2 and 1 spare); 2 match");
  EXPECT_THAT(Register(Hello("c")),
              ElementsAre("a start job-1 rdzv:29400", "b start job-1 rdzv:29400",
                          "c start job-1 rdzv:29400"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1", "c busy job-1"));
}

TEST_F(SchedulerTest, ALostNodesPartGoesToASpareWithoutARestartAndTheJobSucceeds) {
  std::string id = RunningWithASpare();  // c waits as the spare.
  // b's daemon is killed; it comes back without the job: c takes b's part in the run.
  Deregister("b");
  now_ += absl::Seconds(1);
  EXPECT_THAT(Register(Hello("b")), IsEmpty());  // Nothing replaced, nothing cancelled.
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (it registered again without the job); a spare "
            "takes its place (spare 1 of 1 used)");
  EXPECT_EQ(Job(id).spares_used(), 1);
  EXPECT_EQ(Job(id).node_replacements(), 0);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle", "c busy job-1"));
  RunStatus(id, {"a", "c"});
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank -1 first -1 exit -1",
                                        "c rank 1 first 1 exit -1"));
  EXPECT_TRUE(Job(id).nodes(1).taken_by_spare());
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_THAT(Update("c", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, ADgtRunThatLeftTheRunIsCoveredByASpareThenTheNextLossFailsTheJob) {
  std::string id = RunningWithASpare();
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 137)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(),
            "node b: its dgt-run left the run, which goes on (dgt-run exited with code 137); a "
            "spare takes its place (spare 1 of 1 used)");
  // No spare is left: a's loss ends the job as without spares.
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 137)),
              ElementsAre("c cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(), "node a: dgt-run exited with code 137");
}

// The lost node's daemon comes back after the spare took its part: an idle node, not a second
// loss (before, the job failed on "registered again without the job", or spent a restart).
TEST_F(SchedulerTest, ANodeWhosePartASpareTookComesBackIdleAndTheJobGoesOn) {
  std::string id = RunningWithASpare();
  Deregister("b");
  now_ += absl::Seconds(11);
  EXPECT_THAT(Tick(), IsEmpty());
  const std::string reason =
      "node b: its daemon was lost mid-job (no re-registration within 10 s); a spare takes its "
      "place (spare 1 of 1 used)";
  EXPECT_EQ(Job(id).reason(), reason);
  RunStatus(id, {"a", "c"});
  now_ += absl::Seconds(5);
  EXPECT_THAT(Register(Hello("b")), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(), reason);
  EXPECT_EQ(Job(id).spares_used(), 1);
  EXPECT_EQ(Job(id).node_replacements(), 0);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle", "c busy job-1"));
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_THAT(Update("c", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
}

// A later loss with a restart left goes to the idle node whose earlier part the spare took
// (before, a node listed in the job was never chosen, and the job waited for a new node).
TEST_F(SchedulerTest, AReplacementGoesToTheNodeWhosePartASpareTook) {
  std::string id = RunningWithASpare(/*max_restarts=*/1);
  Deregister("b");
  now_ += absl::Seconds(11);
  Tick();
  RunStatus(id, {"a", "c"});
  EXPECT_THAT(Register(Hello("b")), IsEmpty());
  Deregister("c");
  now_ += absl::Seconds(11);
  EXPECT_THAT(Tick(), ElementsAre("b start job-1 rdzv:29400"));
  EXPECT_EQ(Job(id).reason(),
            "node c: its daemon was lost mid-job (no re-registration within 10 s); replacing it "
            "(restart 1 of 1)");
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank -1 first -1 exit -1",
                                        "b rank -1 first -1 exit -1"));
  EXPECT_TRUE(Job(id).nodes(1).taken_by_spare());
  EXPECT_FALSE(Job(id).nodes(2).taken_by_spare());
  RunStatus(id, {"a", "b"}, /*restarts=*/0);
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank -1 first -1 exit -1",
                                        "b rank 1 first 1 exit -1"));
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED)), IsEmpty());
  EXPECT_THAT(Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_THAT(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
}

// The spare itself is lost while it waits: nothing is taken over, the job has one spare fewer.
TEST_F(SchedulerTest, ALostWaitingSpareLeavesTheJobWithOneSpareFewer) {
  std::string id = RunningWithASpare();
  Deregister("c");
  now_ += absl::Seconds(11);
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(),
            "node c: its daemon was lost mid-job (no re-registration within 10 s); it held no "
            "ranks: the job goes on with one spare fewer (spare 1 of 1 used)");
  EXPECT_TRUE(Job(id).nodes(2).taken_by_spare());
  EXPECT_TRUE(Job(id).nodes(2).lost_without_ranks());
  EXPECT_FALSE(Job(id).nodes(1).lost_without_ranks());
  EXPECT_EQ(Job(id).spares_used(), 1);
}

// While a lost node's grace runs, its last node rank is the spare's already: the logs of that
// rank are read from the spare (before, from the first node listed: the lost one).
TEST_F(SchedulerTest, LogsOfARankASpareTookAreReadFromTheSpareDuringTheGrace) {
  std::string id = RunningWithASpare();
  Deregister("b");
  RunStatus(id, {"a", "c"});
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank 1 first 1 exit -1",
                                        "c rank 1 first 1 exit -1"));
  auto target = s_.LogTargetFor(id, 1);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->node, "c");
  EXPECT_EQ(target->local_rank, 0);
}

TEST_F(SchedulerTest, LostNodeWithRestartsLeftStartsTheJobAgainThere) {
  v1::JobSpec spec = Spec(2, 2);
  spec.set_max_restarts(1);
  std::string id = RunningOnAB(spec);
  RunStatus(id, {"a", "b"});
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank 1 first 2 exit -1"));
  Deregister("b");
  now_ += absl::Seconds(3);
  // Back without the job: the same job id starts on it again; its dgt-run joins the run.
  EXPECT_THAT(Register(Hello("b")), ElementsAre("b start job-1 rdzv:29400"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (it registered again without the job); "
            "replacing it (restart 1 of 1)");
  EXPECT_EQ(Job(id).node_replacements(), 1);
  EXPECT_EQ(Job(id).restarts(), 0);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit -1", "b rank -1 first -1 exit -1"));
  // The new round (restart 1) gives b its rank again.
  Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED));
  RunStatus(id, {"b", "a"}, 1);
  EXPECT_EQ(Job(id).restarts(), 1);
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 1 first 2 exit -1", "b rank 0 first 0 exit -1"));
  // A second loss: no restart left (run restarts 1 + replacements 1 >= max_restarts 1).
  Deregister("b");
  now_ += absl::Seconds(10);
  EXPECT_THAT(Tick(), ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "max_restarts 1");
}

TEST_F(SchedulerTest, LostNodeReplacedByTheNextIdleMatchingNode) {
  Register(Hello("a", {{"pool", "x"}}));
  Register(Hello("b", {{"pool", "x"}}));
  Register(Hello("c", {{"pool", "x"}}));
  Register(Hello("d", {{"pool", "y"}}));
  std::string j1, j2, j3;
  v1::JobSpec spec = Spec(2, 1, {{"pool", "x"}});
  spec.set_max_restarts(3);
  Submit(spec, &j1);                         // On a and b.
  Submit(Spec(1, 1, {{"pool", "x"}}), &j2);  // On c.
  Update("a", jobs::Update(j1, v1::JOB_EVENT_STARTED));
  Update("b", jobs::Update(j1, v1::JOB_EVENT_STARTED));
  Deregister("b");
  now_ += absl::Seconds(10);
  // No idle node of pool x (d does not match): the replacement waits.
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job(j1).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(j1).reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "replacing it (restart 1 of 3)");
  // A queued job behind it does not take the node the replacement waits for.
  Submit(Spec(1, 1, {{"pool", "x"}}), &j3);
  EXPECT_THAT(Update("c", jobs::Update(j2, v1::JOB_EVENT_EXITED, 0)),
              ElementsAre("c start job-1 rdzv:29400"));
  EXPECT_THAT(JobNodes(j1),
              ElementsAre("a rank -1 first -1 exit -1", "c rank -1 first -1 exit -1"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "c busy job-1", "d idle"));
  EXPECT_EQ(Job(j3).state(), v1::JOB_STATE_QUEUED);
  // b back without the job: it is not in job-1 any more, and takes job-3.
  EXPECT_THAT(Register(Hello("b", {{"pool", "x"}})), ElementsAre("b start job-3 rdzv:29400"));
  Update("a", jobs::Update(j1, v1::JOB_EVENT_EXITED, 0));
  Update("c", jobs::Update(j1, v1::JOB_EVENT_EXITED, 0));
  EXPECT_EQ(Job(j1).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SchedulerTest, RanksFromTheFinalPollAndKeptAfterTheRunCloses) {
  Register(Hello("a"));
  std::string id;
  Submit(Spec(1, 2), &id);
  EXPECT_THAT(s_.ActiveJobIds(), ElementsAre("job-1"));
  // The job ends before any poll of its run.
  Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(
      s_.LogTargetFor(id, 1).status().message(),
      "job 'job-1' rank 1 is not known yet: its run has not formed (ranks 0 to 1 once it has)");
  // Its final poll still gives it the ranks, once.
  EXPECT_THAT(s_.ActiveJobIds(), ElementsAre("job-1"));
  RunStatus(id, {"a"});
  EXPECT_THAT(s_.ActiveJobIds(), IsEmpty());
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank 0 first 0 exit 0"));
  auto target = s_.LogTargetFor(id, 1);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->node, "a");
  EXPECT_EQ(target->local_rank, 1);
  // A running job's closed run (no ranks now) keeps the ranks the job had.
  std::string id2;
  Submit(Spec(1, 1), &id2);
  RunStatus(id2, {"a"}, 2);
  RunStatus(id2, {});
  rendezvous::RunStatus closed;
  closed.run_id = id2;
  closed.nodes.emplace_back().node_id = "a";  // Node rank -1.
  s_.OnRunStatus(closed, now_);
  EXPECT_THAT(JobNodes(id2), ElementsAre("a rank 0 first 0 exit -1"));
  EXPECT_EQ(Job(id2).restarts(), 2);
}

// The job's end waits out a lost node's grace: its daemon may come back with the job's exit.
TEST_F(SchedulerTest, NodeLostForGoodFailsTheJobWhenItsGraceEndsAfterTheOthersEnded) {
  std::string id = RunningOnAB(Spec(2, 1));
  Deregister("b");
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  now_ += absl::Seconds(10);
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "max_restarts 0");
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank -1 first -1 exit 0", "b rank -1 first -1 exit -1"));
}

// After a leader change every daemon registers again with the new leader, in any order. One
// node's exit 0 before the other node was back failed the job ("its daemon was lost before it
// reported the job's end"), though the other node came back 0.2 s later with exit 0 too.
TEST_F(SchedulerTest, ARestoredJobWaitsForItsNodesToComeBackWithTheirExits) {
  std::string id = RunningOnAB(Spec(2, 1));
  std::vector<v1::JobInfo> saved = s_.Jobs();
  Scheduler restored(SchedulerOptions{"rdzv:29400", 30});
  restored.Restore(saved, now_);
  std::vector<Action> out;
  ASSERT_TRUE(restored.Register(Hello("a", {}, {id}), now_, &out).ok());
  ASSERT_TRUE(restored.OnUpdate("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0), now_, &out).ok());
  EXPECT_EQ(restored.FindJob(id)->state(), v1::JOB_STATE_RUNNING);
  now_ += absl::Milliseconds(200);
  ASSERT_TRUE(restored.Register(Hello("b", {}, {id}), now_, &out).ok());
  ASSERT_TRUE(restored.OnUpdate("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 0), now_, &out).ok());
  EXPECT_EQ(restored.FindJob(id)->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Describe(out), IsEmpty());
  // A node that never comes back: the job fails when its grace ends.
  Scheduler again(SchedulerOptions{"rdzv:29400", 30});
  again.Restore(saved, now_);
  ASSERT_TRUE(again.Register(Hello("a", {}, {id}), now_, &out).ok());
  ASSERT_TRUE(again.OnUpdate("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0), now_, &out).ok());
  EXPECT_EQ(again.NextTick(), now_ + absl::Seconds(10));
  again.Tick(now_ + absl::Seconds(10), &out);
  EXPECT_EQ(again.FindJob(id)->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(again.FindJob(id)->reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "max_restarts 0");
}

TEST_F(SchedulerTest, DrainingNodeTakesNoJob) {
  Register(Hello("a"));
  std::vector<Action> out;
  s_.Drain("a", now_, &out);
  std::string id;
  EXPECT_THAT(Submit(Spec(1, 1), &id), IsEmpty());
  EXPECT_EQ(Job(id).reason(), "needs 1 idle node; 0 match");
  EXPECT_THAT(NodeStates(), ElementsAre("a draining"));
}

TEST_F(SchedulerTest, RestoreKeepsIdsAndWaitsForNodes) {
  Register(Hello("a"));
  std::string id;
  Submit(Spec(1, 1), &id);
  Submit(Spec(1, 1));
  std::vector<v1::JobInfo> saved = s_.Jobs();
  Scheduler restored(SchedulerOptions{"rdzv:1", 30});
  restored.Restore(saved, now_);
  std::vector<Action> out;
  auto next = restored.Submit(Spec(1, 1), now_, &out);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, "job-3");
  // a comes back running job-1: job-2 stays queued behind no one but a busy node.
  ASSERT_TRUE(restored.Register(Hello("a", {}, {"job-1"}), now_, &out).ok());
  EXPECT_THAT(Describe(out), IsEmpty());
  EXPECT_EQ(restored.FindJob("job-2")->reason(), "needs 1 idle node; 0 match");
  ASSERT_TRUE(
      restored.OnUpdate("a", jobs::Update("job-1", v1::JOB_EVENT_EXITED, 0), now_, &out).ok());
  EXPECT_THAT(Describe(out), ElementsAre("a start job-2 rdzv:1"));
  EXPECT_EQ(restored.FindJob("job-1")->state(), v1::JOB_STATE_SUCCEEDED);
}

// The StartJob a daemon keeps for a job it runs (what the service sent it).
v1::StartJob Started(const std::string& id, const std::string& uid,
                     const std::vector<std::string>& nodes, int max_restarts = 0) {
  v1::StartJob start;
  start.set_job_id(id);
  *start.mutable_spec() = Spec(2, 2);
  start.mutable_spec()->set_max_restarts(max_restarts);
  start.set_rdzv_endpoint("rdzv:29400");
  start.set_uid(uid);
  for (const auto& n : nodes) start.add_job_nodes(n);
  start.set_submitted_unix_s(900);
  start.set_started_unix_s(905);
  return start;
}

// A daemon's hello listing `starts` as running (ids and StartJobs).
v1::NodeHello Running(const std::string& name, const std::vector<v1::StartJob>& starts) {
  v1::NodeHello hello = Hello(name);
  for (const auto& start : starts) {
    hello.add_running_job_ids(start.job_id());
    *hello.add_running_jobs() = start;
  }
  return hello;
}

// The dgt-run of a part a spare took still runs when its daemon comes back listing the job: it is
// stopped, and the node is busy until it exits.
TEST_F(SchedulerTest, AStillRunningPartASpareTookIsStopped) {
  std::string id = RunningWithASpare(/*max_restarts=*/1);
  const std::string uid = Job(id).uid();
  Deregister("b");
  now_ += absl::Seconds(11);
  Tick();  // c takes b's part.
  RunStatus(id, {"a", "c"});
  Deregister("a");  // In its grace.
  EXPECT_THAT(Register(Running("b", {Started(id, uid, {"a", "b", "c"}, 1)})),
              ElementsAre("b cancel job-1 30"));
  EXPECT_THAT(NodeStates(), ElementsAre("b busy job-1", "c busy job-1"));
  EXPECT_EQ(Job(id).spares_used(), 1);
  EXPECT_EQ(Job(id).node_replacements(), 0);
}

TEST_F(SchedulerTest, SubmitDrawsAUidAndStartJobCarriesIt) {
  Register(Hello("a"));
  Register(Hello("b"));
  std::vector<Action> out;
  auto id = s_.Submit(Spec(2, 2), now_, &out);
  ASSERT_TRUE(id.ok());
  const std::string uid = Job(*id).uid();
  EXPECT_EQ(uid.size(), 32u);
  EXPECT_EQ(uid.find_first_not_of("0123456789abcdef"), std::string::npos) << uid;
  ASSERT_EQ(out.size(), 2u);
  for (const Action& a : out) {
    EXPECT_EQ(a.message.start().uid(), uid);
    EXPECT_THAT(a.message.start().job_nodes(), ElementsAre("a", "b"));
    EXPECT_EQ(a.message.start().submitted_unix_s(), 1000);
    EXPECT_EQ(a.message.start().started_unix_s(), 1000);
  }
  Update("a", jobs::Update(*id, v1::JOB_EVENT_EXITED, 0));
  Update("b", jobs::Update(*id, v1::JOB_EVENT_EXITED, 0));
  std::string second;
  Submit(Spec(1, 1), &second);
  EXPECT_EQ(Job(second).uid().size(), 32u);
  EXPECT_NE(Job(second).uid(), uid);
}

// A restarted service (memory backend) adopts a 2-node job from its daemons' reports.
TEST_F(SchedulerTest, AdoptsARunningJobReportedByOneNodeThenTheOther) {
  const v1::StartJob start = Started("job-7", "u7", {"a", "b"});
  EXPECT_THAT(Register(Running("a", {start})), IsEmpty());
  EXPECT_EQ(Job("job-7").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job("job-7").uid(), "u7");
  EXPECT_EQ(Job("job-7").submitted_unix_s(), 900);
  EXPECT_EQ(Job("job-7").started_unix_s(), 905);
  EXPECT_EQ(Job("job-7").spec().instance_count(), 2);
  EXPECT_EQ(Job("job-7").reason(), "adopted after a service restart (reported by node a)");
  EXPECT_THAT(JobNodes("job-7"),
              ElementsAre("a rank -1 first -1 exit -1", "b rank -1 first -1 exit -1"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-7"));
  // b is lost mid-job as of now: it has lost_node_grace to come back with it.
  EXPECT_EQ(s_.NextTick(), kT0 + absl::Seconds(10));
  EXPECT_THAT(s_.TakeChanges().jobs, ElementsAre("job-7"));
  now_ += absl::Seconds(5);
  EXPECT_THAT(Register(Running("b", {start})), IsEmpty());
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-7", "b busy job-7"));
  EXPECT_EQ(s_.NextTick(), absl::InfiniteFuture());
  now_ += absl::Seconds(10);
  EXPECT_THAT(Tick(), IsEmpty());
  EXPECT_EQ(Job("job-7").state(), v1::JOB_STATE_RUNNING);
  // Ranks and restarts come from the run's status (run id = job id).
  RunStatus("job-7", {"b", "a"}, 1);
  EXPECT_EQ(Job("job-7").restarts(), 1);
  EXPECT_THAT(JobNodes("job-7"),
              ElementsAre("a rank 1 first 2 exit -1", "b rank 0 first 0 exit -1"));
  auto rank3 = s_.LogTargetFor("job-7", 3);
  ASSERT_TRUE(rank3.ok());
  EXPECT_EQ(rank3->node, "a");
  EXPECT_EQ(rank3->local_rank, 1);
  // The next id follows the adopted one; it waits for a node.
  std::string next;
  EXPECT_THAT(Submit(Spec(1, 1), &next), IsEmpty());
  EXPECT_EQ(next, "job-8");
  EXPECT_THAT(s_.Jobs(), testing::SizeIs(2));
  EXPECT_THAT(Update("a", jobs::Update("job-7", v1::JOB_EVENT_EXITED, 0)),
              ElementsAre("a start job-8 rdzv:29400"));
  EXPECT_THAT(Update("b", jobs::Update("job-7", v1::JOB_EVENT_EXITED, 0)), IsEmpty());
  EXPECT_EQ(Job("job-7").state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Job("job-7").reason(), "");
  EXPECT_THAT(JobNodes("job-7"), ElementsAre("a rank 1 first 2 exit 0", "b rank 0 first 0 exit 0"));
  // A daemon before running_jobs lists only the id of a job the service does not know: cancelled.
  EXPECT_THAT(Register(Hello("c", {}, {"job-9"})), ElementsAre("c cancel job-9 30"));
  std::string after;
  Submit(Spec(1, 1), &after);
  EXPECT_EQ(after, "job-9");
}

TEST_F(SchedulerTest, AdoptedJobsNodeNeverBackFollowsTheLostNodeRules) {
  // max_restarts 0: the job fails when the grace ends; the reporting node's dgt-run is cancelled.
  EXPECT_THAT(Register(Running("a", {Started("job-3", "u3", {"a", "b"})})), IsEmpty());
  now_ += absl::Milliseconds(9999);
  EXPECT_THAT(Tick(), IsEmpty());
  now_ += absl::Milliseconds(1);
  EXPECT_THAT(Tick(), ElementsAre("a cancel job-3 30"));
  EXPECT_EQ(Job("job-3").state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job("job-3").reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "max_restarts 0");
  EXPECT_EQ(Job("job-3").finished_unix_s(), 1010);
  // b back late with it: told to stop it.
  EXPECT_THAT(Register(Running("b", {Started("job-3", "u3", {"a", "b"})})),
              ElementsAre("b cancel job-3 30"));
}

TEST_F(SchedulerTest, AdoptedJobsLostNodeReplacedWithRestartsLeft) {
  EXPECT_THAT(Register(Hello("c")), IsEmpty());
  EXPECT_THAT(Register(Running("a", {Started("job-4", "u4", {"a", "b"}, 1)})), IsEmpty());
  now_ += absl::Seconds(10);
  std::vector<Action> out;
  s_.Tick(now_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].node, "c");
  EXPECT_EQ(out[0].message.start().job_id(), "job-4");
  EXPECT_EQ(out[0].message.start().uid(), "u4");
  EXPECT_THAT(out[0].message.start().job_nodes(), ElementsAre("a", "c"));
  EXPECT_EQ(out[0].message.start().submitted_unix_s(), 900);
  EXPECT_EQ(Job("job-4").reason(),
            "node b: its daemon was lost mid-job (no re-registration within 10 s); "
            "replacing it (restart 1 of 1)");
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-4", "c busy job-4"));
}

// The node's own lost part started again gets the same uid: its daemon keeps the job dir (and
// the earlier attempts' logs) instead of moving it aside.
TEST_F(SchedulerTest, ReplacementStartJobKeepsTheJobsUid) {
  Register(Hello("a"));
  Register(Hello("b"));
  std::string id;
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  Submit(spec, &id);
  Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
  Update("b", jobs::Update(id, v1::JOB_EVENT_STARTED));
  Deregister("b");
  std::vector<Action> out;
  ASSERT_TRUE(s_.Register(Hello("b"), now_, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].node, "b");
  EXPECT_EQ(out[0].message.start().uid(), Job(id).uid());
  EXPECT_THAT(out[0].message.start().job_nodes(), ElementsAre("a", "b"));
}

TEST_F(SchedulerTest, AdoptedJobsReplacementNodeTakesTheLostNodesPlace) {
  // b was replaced by c before the restart: a's StartJob names b, c's names c.
  EXPECT_THAT(Register(Running("a", {Started("job-5", "u5", {"a", "b"})})), IsEmpty());
  EXPECT_THAT(Register(Running("c", {Started("job-5", "u5", {"a", "c"})})), IsEmpty());
  EXPECT_THAT(JobNodes("job-5"),
              ElementsAre("a rank -1 first -1 exit -1", "c rank -1 first -1 exit -1"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-5", "c busy job-5"));
  EXPECT_EQ(s_.NextTick(), absl::InfiniteFuture());
}

TEST_F(SchedulerTest, SameIdWithAnotherUidIsAnotherJobAndCancelled) {
  Register(Hello("a"));
  std::string id;
  Submit(Spec(1, 1), &id);
  const std::string uid = Job(id).uid();
  Update("a", jobs::Update(id, v1::JOB_EVENT_STARTED));
  // b runs an older job-1 (another uid): stopped there, job-1 stays a's.
  EXPECT_THAT(Register(Running("b", {Started("job-1", "0123", {"b"})})),
              ElementsAre("b cancel job-1 30"));
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle"));
  EXPECT_EQ(Job(id).uid(), uid);
  EXPECT_THAT(JobNodes(id), ElementsAre("a rank -1 first -1 exit -1"));
  // a back from a stream break listing job-1 with another uid: not ours; a lost our job-1.
  Deregister("a");
  EXPECT_THAT(Register(Running("a", {Started("job-1", "4567", {"a"})})),
              ElementsAre("a cancel job-1 30"));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(id).reason(),
            "node a: its daemon was lost mid-job (it registered again without the job); "
            "max_restarts 0");
  // With our uid it would have been back on it.
  Scheduler other(SchedulerOptions{"rdzv:1", 30});
  std::vector<Action> none;
  ASSERT_TRUE(other.Register(Hello("a"), now_, &none).ok());
  auto again = other.Submit(Spec(1, 1), now_, &none);
  ASSERT_TRUE(again.ok());
  const std::string own = other.FindJob(*again)->uid();
  other.Deregister("a", now_, &none);
  none.clear();
  ASSERT_TRUE(other.Register(Running("a", {Started(*again, own, {"a"})}), now_, &none).ok());
  EXPECT_THAT(Describe(none), IsEmpty());
  EXPECT_EQ(other.FindJob(*again)->state(), v1::JOB_STATE_STARTING);
}

// A daemon lost mid-job comes back listing a job that was cancelled meanwhile: it is told to stop
// it, and stays busy with it until it reports the exit. Taken as idle at once, it was given the
// next job while the cancelled one's dgt-run still stopped: one node in two jobs.
TEST_F(SchedulerTest, NodeBackWithACancelledJobStaysBusyUntilItExits) {
  const std::string first = RunningOnAB(Spec(2, 1));
  Deregister("a");
  std::vector<Action> out;
  ASSERT_TRUE(s_.Cancel(first, 5, now_, &out).ok());
  EXPECT_EQ(Describe(out), (std::vector<std::string>{"b cancel job-1 5"}));
  std::string second;
  EXPECT_TRUE(Submit(Spec(1, 1), &second).empty());  // b is still stopping job-1.
  EXPECT_EQ(Register(Hello("a", {}, {first})), (std::vector<std::string>{"a cancel job-1 30"}));
  EXPECT_EQ(NodeStates(), (std::vector<std::string>{"a busy job-1", "b busy job-1"}));
  EXPECT_EQ(Job(second).state(), v1::JOB_STATE_QUEUED);
  // a's dgt-run exits: a is free, and takes the queued job.
  EXPECT_EQ(Update("a", jobs::Update(first, v1::JOB_EVENT_EXITED, 143)),
            (std::vector<std::string>{"a start job-2 rdzv:29400"}));
  EXPECT_EQ(Job(second).state(), v1::JOB_STATE_STARTING);
}

// A node lost mid-job, then the job cancelled while its other node stops: when the lost node's
// grace ended, a replacement was started on a newly registered node for the cancelled job.
TEST_F(SchedulerTest, ACancelledJobGetsNoReplacementForANodeLostBefore) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string id = RunningOnAB(spec);
  Deregister("a");
  std::vector<Action> out;
  ASSERT_TRUE(s_.Cancel(id, 5, now_, &out).ok());
  EXPECT_EQ(Describe(out), (std::vector<std::string>{"b cancel job-1 5"}));
  now_ += absl::Seconds(15);  // a's grace (10 s) is over.
  EXPECT_TRUE(Register(Hello("c")).empty());
  EXPECT_TRUE(Tick().empty());
  EXPECT_EQ(NodeStates(), (std::vector<std::string>{"b busy job-1", "c idle"}));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(id).node_replacements(), 0);
  EXPECT_TRUE(Update("b", jobs::Update(id, v1::JOB_EVENT_EXITED, 143)).empty());
  EXPECT_GT(Job(id).finished_unix_s(), 0);
}

// A lost node's part waits for an idle node; the job is cancelled meanwhile: a node that
// registers then must not be started on the cancelled job.
TEST_F(SchedulerTest, ACancelledJobWaitingForAReplacementStartsNone) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string id = RunningOnAB(spec);
  Deregister("a");
  now_ += absl::Seconds(15);
  EXPECT_TRUE(Tick().empty());  // No idle node: the replacement waits.
  std::vector<Action> out;
  ASSERT_TRUE(s_.Cancel(id, 5, now_, &out).ok());
  EXPECT_EQ(Describe(out), (std::vector<std::string>{"b cancel job-1 5"}));
  EXPECT_TRUE(Register(Hello("c")).empty());
  EXPECT_EQ(NodeStates(), (std::vector<std::string>{"b busy job-1", "c idle"}));
}

// A daemon lost mid-job whose part was replaced comes back still running it: it is told to stop
// it and stays busy until its exit, which frees it although the job is no longer its.
TEST_F(SchedulerTest, NodeBackWithAReplacedPartStaysBusyUntilItExits) {
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(1);
  Register(Hello("a"));
  std::string first;
  EXPECT_EQ(Submit(spec, &first), (std::vector<std::string>{"a start job-1 rdzv:29400"}));
  Deregister("a");
  now_ += absl::Seconds(15);
  EXPECT_EQ(Register(Hello("b")), (std::vector<std::string>{}));
  EXPECT_EQ(Tick(), (std::vector<std::string>{"b start job-1 rdzv:29400"}));
  std::string second;
  EXPECT_TRUE(Submit(Spec(1, 1), &second).empty());
  EXPECT_EQ(Register(Hello("a", {}, {first})), (std::vector<std::string>{"a cancel job-1 30"}));
  EXPECT_EQ(NodeStates(), (std::vector<std::string>{"a busy job-1", "b busy job-1"}));
  EXPECT_EQ(Update("a", jobs::Update(first, v1::JOB_EVENT_EXITED, 143)),
            (std::vector<std::string>{"a start job-2 rdzv:29400"}));
  EXPECT_EQ(JobNodes(first), (std::vector<std::string>{"b rank -1 first -1 exit -1"}));
}

v1::NodeHello Unhealthy(v1::NodeHello hello, const std::string& reason) {
  hello.set_unhealthy(true);
  hello.set_health_reason(reason);
  return hello;
}

constexpr char kFalseFailed[] = "health check 'false' failed: exited with code 1: (no output)";

TEST_F(SchedulerTest, AnUnhealthyNodeTakesNoJobAndThePendingReasonNamesIt) {
  Register(Hello("a"));
  EXPECT_THAT(Register(Unhealthy(Hello("b"), kFalseFailed)), IsEmpty());
  Register(Hello("c"));
  const std::vector<v1::NodeInfo> nodes = s_.Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_FALSE(nodes[0].unhealthy());
  EXPECT_TRUE(nodes[1].unhealthy());
  EXPECT_EQ(nodes[1].health_reason(), kFalseFailed);
  EXPECT_EQ(nodes[1].state(), "idle");
  std::string id;
  EXPECT_THAT(Submit(Spec(3, 1), &id), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Job(id).reason(),
            "needs 3 idle nodes; 2 match; 1 of 3 registered nodes is unhealthy (b: health check "
            "'false' failed: exited with code 1: (no output))");
  // The same verdict again changes nothing; healthy again, b takes the job.
  EXPECT_THAT(SetHealth("b", true, kFalseFailed), IsEmpty());
  EXPECT_THAT(SetHealth("b", false),
              ElementsAre("a start job-1 rdzv:29400", "b start job-1 rdzv:29400",
                          "c start job-1 rdzv:29400"));
  EXPECT_FALSE(s_.Nodes()[1].unhealthy());
  EXPECT_EQ(s_.Nodes()[1].health_reason(), "");
  EXPECT_THAT(SetHealth("nobody", true, kFalseFailed), IsEmpty());
}

TEST_F(SchedulerTest, ThePendingReasonCountsUnhealthyNodesWithTheJobsLabels) {
  Register(Unhealthy(Hello("a", {{"pool", "x"}}), kFalseFailed));
  Register(Unhealthy(Hello("b", {{"pool", "y"}}), kFalseFailed));
  std::string id;
  EXPECT_THAT(Submit(Spec(1, 1, {{"pool", "x"}}), &id), IsEmpty());
  EXPECT_EQ(Job(id).reason(),
            "needs 1 idle node with labels {pool=x}; 0 match; 1 of 1 registered node with those "
            "labels is unhealthy (a: health check 'false' failed: exited with code 1: (no "
            "output))");
  // The job behind it waits behind it, as for any blocker.
  std::string behind;
  Submit(Spec(1, 1), &behind);
  EXPECT_EQ(Job(behind).reason(), "waiting behind job-1 (first in, first out)");
}

TEST_F(SchedulerTest, ThePendingReasonNamesThreeUnhealthyNodesAndCutsTheirReasons) {
  const std::string long_reason =
      "health check 'x' failed: exited with code 1: " + std::string(154, 'y') + "\xC3\xA9" +
      std::string(50, 'z');
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    Register(Unhealthy(Hello(name), long_reason));
  }
  std::string id;
  Submit(Spec(2, 1), &id);
  // At most 200 bytes: 45 of text, 154 y's, and not the first half of the 2-byte character.
  const std::string cut =
      "health check 'x' failed: exited with code 1: " + std::string(154, 'y') + "...";
  EXPECT_EQ(Job(id).reason(), absl::StrCat("needs 2 idle nodes; 0 match; 5 of 5 registered nodes "
                                           "are unhealthy (a: ",
                                           cut, "; b: ", cut, "; c: ", cut, "; and 2 more)"));
}

// A node that turns unhealthy under a running job: the job goes on (its dgt-run has health
// checks of its own); the node takes nothing new, not even the job's replacement part.
TEST_F(SchedulerTest, ARunningJobGoesOnOnANodeTurnedUnhealthyWhichTakesNothingNew) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  std::string id = RunningOnAB(spec);
  EXPECT_THAT(SetHealth("a", true, kFalseFailed), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b busy job-1"));
  // b is lost and comes back unhealthy without the job: its part waits for a healthy node.
  Deregister("b");
  now_ += absl::Seconds(3);
  EXPECT_THAT(Register(Unhealthy(Hello("b"), kFalseFailed)), IsEmpty());
  EXPECT_EQ(Job(id).reason(),
            "node b: its daemon was lost mid-job (it registered again without the job); "
            "replacing it (restart 1 of 2)");
  EXPECT_THAT(NodeStates(), ElementsAre("a busy job-1", "b idle"));
  EXPECT_THAT(Register(Hello("c")), ElementsAre("c start job-1 rdzv:29400"));
  // a's part ends: a is idle but unhealthy, so the next job waits.
  Update("a", jobs::Update(id, v1::JOB_EVENT_EXITED, 0));
  std::string next;
  EXPECT_THAT(Submit(Spec(1, 1), &next), IsEmpty());
  EXPECT_EQ(Job(next).reason(),
            "needs 1 idle node; 0 match; 2 of 3 registered nodes are unhealthy (a: health check "
            "'false' failed: exited with code 1: (no output); b: health check 'false' failed: "
            "exited with code 1: (no output))");
  EXPECT_THAT(SetHealth("b", false), ElementsAre("b start job-2 rdzv:29400"));
}

TEST_F(SchedulerTest, ChangesNameWhatToPersist) {
  Register(Hello("a"));
  s_.TakeChanges();
  std::string id;
  Submit(Spec(1, 1), &id);
  Scheduler::Changes c = s_.TakeChanges();
  EXPECT_THAT(c.jobs, ElementsAre("job-1"));
  EXPECT_THAT(c.nodes, ElementsAre("a"));
  // A change of health is the node's; the same verdict again is none.
  SetHealth("a", true, kFalseFailed);
  EXPECT_THAT(s_.TakeChanges().nodes, ElementsAre("a"));
  SetHealth("a", true, kFalseFailed);
  EXPECT_THAT(s_.TakeChanges().nodes, IsEmpty());
  Deregister("a");
  c = s_.TakeChanges();
  EXPECT_THAT(c.removed_nodes, ElementsAre("a"));
  EXPECT_THAT(c.nodes, IsEmpty());
}

TEST_F(SchedulerTest, InvalidSpecAndUnknownUpdates) {
  std::vector<Action> out;
  auto bad = s_.Submit(Spec(0, 1), now_, &out);
  EXPECT_EQ(bad.status().message(), "instance_count: must be >= 1, got 0");
  EXPECT_EQ(s_.OnUpdate("a", jobs::Update("job-5", v1::JOB_EVENT_EXITED), now_, &out).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, UpdateWithoutAnEventChangesNothing) {
  const std::string id = RunningOnAB(Spec(2, 1));
  s_.TakeChanges();
  std::vector<Action> out;
  absl::Status s = s_.OnUpdate("a", jobs::Update(id, v1::JOB_EVENT_UNSPECIFIED), now_, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "JobUpdate.event: must be started or exited, got unspecified (0)");
  EXPECT_THAT(out, IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(s_.TakeChanges().jobs, IsEmpty());
}

}  // namespace
}  // namespace dgt::jobs
