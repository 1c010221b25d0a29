#include "jobs/job_state.h"

#include <string>

#include "gtest/gtest.h"

namespace dgt::jobs {
namespace {

TEST(JobStateName, EveryStateHasItsWord) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_QUEUED), "queued");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_STARTING), "starting");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "running");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_SUCCEEDED), "succeeded");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_FAILED), "failed");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_CANCELLED), "cancelled");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(JobStateName(static_cast<v1::JobState>(99)), "unspecified");
}

TEST(ParseJobState, TakesExactlyTheWords) {
  for (int i = v1::JobState_MIN; i <= v1::JobState_MAX; ++i) {
    const auto state = static_cast<v1::JobState>(i);
    if (state == v1::JOB_STATE_UNSPECIFIED) continue;
    EXPECT_EQ(ParseJobState(JobStateName(state)), state) << i;
  }
  EXPECT_EQ(ParseJobState("unspecified"), std::nullopt);
  EXPECT_EQ(ParseJobState("Running"), std::nullopt);
  EXPECT_EQ(ParseJobState("JOB_STATE_RUNNING"), std::nullopt);
  EXPECT_EQ(ParseJobState(""), std::nullopt);
}

TEST(IsTerminal, OnlyTheEnds) {
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_UNSPECIFIED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_QUEUED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_STARTING));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_RUNNING));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_CANCELLED));
}

TEST(JobEventName, EveryEventHasItsWord) {
  EXPECT_EQ(JobEventName(v1::JOB_EVENT_STARTED), "started");
  EXPECT_EQ(JobEventName(v1::JOB_EVENT_EXITED), "exited");
  EXPECT_EQ(JobEventName(v1::JOB_EVENT_UNSPECIFIED), "unspecified");
  EXPECT_EQ(ParseJobEvent("started"), v1::JOB_EVENT_STARTED);
  EXPECT_EQ(ParseJobEvent("exited"), v1::JOB_EVENT_EXITED);
  EXPECT_EQ(ParseJobEvent("JOB_EVENT_EXITED"), std::nullopt);
}

TEST(JobInfoJson, StateIsItsWord) {
  v1::JobInfo job;
  job.set_job_id("job-3");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_restarts(1);
  EXPECT_EQ(JobInfoToJson(job, /*all_fields=*/false),
            R"({"job_id":"job-3","restarts":1,"state":"running"})");
  auto back = JobInfoFromJson(JobInfoToJson(job, /*all_fields=*/false));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), job.SerializeAsString());
}

TEST(JobInfoJson, AllFieldsRoundTrip) {
  v1::JobInfo job;
  job.set_job_id("job-1");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  v1::JobNode* node = job.add_nodes();
  node->set_node_name("a");
  node->set_exit_code(0);
  const std::string json = JobInfoToJson(job, /*all_fields=*/true);
  EXPECT_NE(json.find(R"("state":"succeeded")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("exit_code":0)"), std::string::npos) << json;
  auto back = JobInfoFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), job.SerializeAsString());
}

TEST(JobInfoJson, NoStateIsUnspecified) {
  auto job = JobInfoFromJson(R"({"job_id":"job-2"})");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(JobInfoToJson(*job, /*all_fields=*/false), R"({"job_id":"job-2"})");
}

TEST(JobInfoJson, Errors) {
  EXPECT_EQ(JobInfoFromJson("[1]").status().message(), "JobInfo: not a JSON object");
  EXPECT_EQ(JobInfoFromJson(R"({"state":"paused"})").status().message(),
            R"(JobInfo: unknown state "paused")");
  EXPECT_EQ(JobInfoFromJson(R"({"state":"JOB_STATE_RUNNING"})").status().message(),
            R"(JobInfo: unknown state "JOB_STATE_RUNNING")");
  EXPECT_EQ(JobInfoFromJson(R"({"state":3})").status().message(), "JobInfo: unknown state 3");
  EXPECT_EQ(JobInfoFromJson(R"({"job_id":7})").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgt::jobs
