#include "jobs/job_state_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
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
  EXPECT_EQ(
      DecodeJob(R"({"version":1,"job":{"job_id":"job-1","state":"paused"}})").status().message(),
      R"(job state record: "job": JobInfo: unknown state "paused")");
  auto back = DecodeJob(EncodeJob(job));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->job_id(), "job-1");
  EXPECT_EQ(back->state(), v1::JOB_STATE_QUEUED);
}

// Records store the state as the word `dgt jobs` shows: each word reads back as its state.
TEST(JobRecord, StateWordsReadBack) {
  const std::pair<const char*, v1::JobState> words[] = {
      {"queued", v1::JOB_STATE_QUEUED},   {"starting", v1::JOB_STATE_STARTING},
      {"running", v1::JOB_STATE_RUNNING}, {"succeeded", v1::JOB_STATE_SUCCEEDED},
      {"failed", v1::JOB_STATE_FAILED},   {"cancelled", v1::JOB_STATE_CANCELLED}};
  for (const auto& [word, state] : words) {
    const std::string record = absl::StrCat(
        R"({"version":1,"job":{"job_id":"job-4","spec":{"command":"true","instance_count":1},)",
        R"("state":")", word, R"(","restarts":2}})");
    auto job = DecodeJob(record);
    ASSERT_TRUE(job.ok()) << word << ": " << job.status();
    EXPECT_EQ(job->state(), state) << word;
    EXPECT_EQ(job->restarts(), 2);
    EXPECT_EQ(job->spec().command(), "true");
    EXPECT_EQ(EncodeJob(*job),
              absl::StrCat(R"({"version":1,"job":{"job_id":"job-4","spec":{"command":"true",)",
                           R"("instance_count":1},"restarts":2,"state":")", word, R"("}})"));
  }
}

}  // namespace
}  // namespace dgt::jobs
