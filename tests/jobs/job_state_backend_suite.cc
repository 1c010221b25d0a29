#include "tests/jobs/job_state_backend_suite.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dgt::jobs::testing {
namespace {

v1::JobInfo MakeJob(const std::string& id, double submitted, v1::JobState state) {
  v1::JobInfo job;
  job.set_job_id(id);
  job.set_state(state);
  job.set_submitted_unix_s(submitted);
  job.mutable_spec()->set_command("echo 'a \"quoted\" command'");
  job.mutable_spec()->set_instance_count(2);
  job.mutable_spec()->mutable_distribution()->set_process_count_per_instance(4);
  (*job.mutable_spec()->mutable_environment_variables())["SEED"] = "7";
  v1::JobNode* n = job.add_nodes();
  n->set_node_name("node-a");
  n->set_node_rank(0);
  n->set_first_rank(0);
  n->set_exit_code(-1);
  job.set_restarts(1);
  return job;
}

std::vector<std::string> Ids(const std::vector<v1::JobInfo>& jobs) {
  std::vector<std::string> out;
  out.reserve(jobs.size());
  for (const auto& j : jobs) out.push_back(j.job_id());
  return out;
}

}  // namespace

void CheckJobsRoundTripInSubmissionOrder(JobStateBackend& backend) {
  // job-10 after job-9 (numbers, not text), ties on the submission time broken by the number.
  ASSERT_TRUE(backend.PutJob(MakeJob("job-10", 5, v1::JOB_STATE_QUEUED)).ok());
  ASSERT_TRUE(backend.PutJob(MakeJob("job-9", 5, v1::JOB_STATE_RUNNING)).ok());
  ASSERT_TRUE(backend.PutJob(MakeJob("job-1", 1, v1::JOB_STATE_SUCCEEDED)).ok());
  auto jobs = backend.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(Ids(*jobs), ::testing::ElementsAre("job-1", "job-9", "job-10"));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      (*jobs)[1], MakeJob("job-9", 5, v1::JOB_STATE_RUNNING)))
      << (*jobs)[1].DebugString();
  // A put replaces the record.
  v1::JobInfo done = MakeJob("job-9", 5, v1::JOB_STATE_FAILED);
  done.set_reason("node b: dgt-run exited with code 3");
  ASSERT_TRUE(backend.PutJob(done).ok());
  jobs = backend.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[1].state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ((*jobs)[1].reason(), "node b: dgt-run exited with code 3");
  ASSERT_TRUE(backend.DeleteJob("job-1").ok());
  EXPECT_EQ(backend.DeleteJob("job-1").code(), absl::StatusCode::kNotFound);
  jobs = backend.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_THAT(Ids(*jobs), ::testing::ElementsAre("job-9", "job-10"));
}

void CheckNodesRoundTripAndDelete(JobStateBackend& backend) {
  v1::NodeInfo a;
  a.set_node_name("a");
  a.set_hostname("a.example");
  a.add_addresses("10.0.0.1");
  a.set_gpu_count(8);
  (*a.mutable_labels())["gpu"] = "a100";
  a.set_state("busy");
  a.set_job_id("job-3");
  v1::NodeInfo b;
  b.set_node_name("b");
  b.set_state("idle");
  // Its health, as dgt-agent reported it, goes with the record.
  b.set_unhealthy(true);
  b.set_health_reason("health check 'false' failed: exited with code 1: (no output)");
  ASSERT_TRUE(backend.PutNode(b).ok());
  ASSERT_TRUE(backend.PutNode(a).ok());
  auto nodes = backend.LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals((*nodes)[0], a));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals((*nodes)[1], b));
  ASSERT_TRUE(backend.DeleteNode("a").ok());
  EXPECT_EQ(backend.DeleteNode("a").code(), absl::StatusCode::kNotFound);
  nodes = backend.LoadNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].node_name(), "b");
  EXPECT_TRUE((*nodes)[0].unhealthy());
  EXPECT_EQ((*nodes)[0].health_reason(),
            "health check 'false' failed: exited with code 1: (no output)");
  // Nodes and jobs do not mix.
  auto jobs = backend.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
}

}  // namespace dgt::jobs::testing
