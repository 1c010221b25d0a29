// The names of job states and job events (dgt.jobs.v1.JobState, JobEvent) as users see them:
// `dgt jobs`, `dgt job show` (and its --json), the logs, docs/JOBS.md and the job state records.
// One mapping for every binary, so the words cannot drift apart.
//
// Pure functions; thread-safe.
#ifndef DGT_JOBS_JOB_STATE_H_
#define DGT_JOBS_JOB_STATE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dgt/jobs/v1/jobs.pb.h"

namespace dgt::jobs {

// "queued", "starting", "running", "succeeded", "failed" or "cancelled"; "unspecified" for
// JOB_STATE_UNSPECIFIED and for a number this build does not know.
absl::string_view JobStateName(v1::JobState state);
// The state named `name` (JobStateName's words, exactly); nullopt for any other text.
std::optional<v1::JobState> ParseJobState(absl::string_view name);
// Succeeded, failed or cancelled: the job is over and never changes state again.
bool IsTerminal(v1::JobState state);

// "started" or "exited"; "unspecified" for JOB_EVENT_UNSPECIFIED and unknown numbers.
absl::string_view JobEventName(v1::JobEvent event);
// The event named `name` (JobEventName's words, exactly); nullopt for any other text.
std::optional<v1::JobEvent> ParseJobEvent(absl::string_view name);

// `job` as one line of JSON: proto3's JSON mapping with jobs.proto's field names, and "state" as
// JobStateName's word. `all_fields`: fields at their default value too (exit_code 0 is a value).
std::string JobInfoToJson(const v1::JobInfo& job, bool all_fields);
// JobInfoToJson's JSON (either form) back. Errors: InvalidArgument naming what is wrong, a
// "state" that is not one of JobStateName's words included.
absl::StatusOr<v1::JobInfo> JobInfoFromJson(absl::string_view json);

}  // namespace dgt::jobs

#endif  // DGT_JOBS_JOB_STATE_H_
