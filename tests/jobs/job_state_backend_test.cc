#include "jobs/job_state_backend.h"

#include "gtest/gtest.h"
#include "tests/jobs/job_state_backend_suite.h"

namespace dgt::jobs {
namespace {

TEST(InMemoryJobStateBackend, JobsRoundTripInSubmissionOrder) {
  InMemoryJobStateBackend backend;
  testing::CheckJobsRoundTripInSubmissionOrder(backend);
}

TEST(InMemoryJobStateBackend, NodesRoundTripAndDelete) {
  InMemoryJobStateBackend backend;
  testing::CheckNodesRoundTripAndDelete(backend);
}

TEST(JobRecord, JsonShapeAndErrors) {
  v1::JobInfo job;
  job.set_job_id("job-1");
  job.set_state(v1::JOB_STATE_QUEUED);
  EXPECT_EQ(EncodeJob(job), R"({"version":1,"job":{"job_id":"job-1","state":"queued"}})");
  EXPECT_EQ(DecodeJob("[1]").status().message(), "job state record: not a JSON object");
  EXPECT_EQ(DecodeJob(R"({"version":2,"job":{}})").status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(DecodeJob(R"({"version":1})").status().message(),
            "job state record: no \"job\" object");
  auto back = DecodeJob(EncodeJob(job));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->job_id(), "job-1");
}

}  // namespace
}  // namespace dgt::jobs
