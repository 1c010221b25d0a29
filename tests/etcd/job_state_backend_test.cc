// The job state backend conformance checks on a real three-member etcd cluster.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "jobs/etcd_job_state_backend.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/jobs/job_state_backend_suite.h"

namespace dgt::jobs {
namespace {

class EtcdJobStateBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (etcd::testing::EtcdCluster::FindEtcd().empty()) GTEST_SKIP() << "no etcd binary";
    cluster_ = new etcd::testing::EtcdCluster();
    absl::Status s = cluster_->Start(3, absl::Seconds(60));
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  std::unique_ptr<EtcdJobStateBackend> Open(const std::string& prefix) {
    EtcdJobStateBackend::Options options;
    options.client.endpoints = cluster_->endpoints();
    options.prefix = prefix;
    auto backend = EtcdJobStateBackend::Open(options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }
  static etcd::testing::EtcdCluster* cluster_;
};

etcd::testing::EtcdCluster* EtcdJobStateBackendTest::cluster_ = nullptr;

TEST_F(EtcdJobStateBackendTest, JobsRoundTripInSubmissionOrder) {
  auto backend = Open("/t1/jobs/");
  ASSERT_NE(backend, nullptr);
  testing::CheckJobsRoundTripInSubmissionOrder(*backend);
  EXPECT_EQ(backend->JobKey("job-9"), "/t1/jobs/job/job-9");
  // A second backend on the same prefix (a restarted service) reads the same jobs.
  auto again = Open("/t1/jobs/");
  auto jobs = again->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id(), "job-9");
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_FAILED);
}

TEST_F(EtcdJobStateBackendTest, NodesRoundTripAndDelete) {
  auto backend = Open("/t2/jobs/");
  ASSERT_NE(backend, nullptr);
  testing::CheckNodesRoundTripAndDelete(*backend);
}

TEST_F(EtcdJobStateBackendTest, UnavailableNamesTheKey) {
  EtcdJobStateBackend::Options options;
  options.client.endpoints = {"127.0.0.1:1"};
  options.client.call_timeout = absl::Milliseconds(300);
  auto backend = EtcdJobStateBackend::Open(options);
  ASSERT_TRUE(backend.ok());
  v1::JobInfo job;
  job.set_job_id("job-1");
  absl::Status s = (*backend)->PutJob(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), "etcd job state: put of /dgt/jobs/job/job-1: ")) << s;
  options.prefix = "";
  EXPECT_EQ(EtcdJobStateBackend::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgt::jobs
