#include "jobs/job_state.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace dgt::jobs {

absl::string_view JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return "queued";
    case v1::JOB_STATE_STARTING:
      return "starting";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_SUCCEEDED:
      return "succeeded";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

std::optional<v1::JobState> ParseJobState(absl::string_view name) {
  for (v1::JobState state :
       {v1::JOB_STATE_QUEUED, v1::JOB_STATE_STARTING, v1::JOB_STATE_RUNNING,
        v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    if (JobStateName(state) == name) return state;
  }
  return std::nullopt;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

absl::string_view JobEventName(v1::JobEvent event) {
  switch (event) {
    case v1::JOB_EVENT_STARTED:
      return "started";
    case v1::JOB_EVENT_EXITED:
      return "exited";
    default:
      return "unspecified";
  }
}

std::optional<v1::JobEvent> ParseJobEvent(absl::string_view name) {
  for (v1::JobEvent event : {v1::JOB_EVENT_STARTED, v1::JOB_EVENT_EXITED}) {
    if (JobEventName(event) == name) return event;
  }
  return std::nullopt;
}

std::string JobInfoToJson(const v1::JobInfo& job, bool all_fields) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = all_fields;
  (void)google::protobuf::util::MessageToJsonString(job, &json, options);
  nlohmann::ordered_json object = nlohmann::ordered_json::parse(json);
  if (object.contains("state")) object["state"] = std::string(JobStateName(job.state()));
  return object.dump();
}

absl::StatusOr<v1::JobInfo> JobInfoFromJson(absl::string_view json) {
  nlohmann::json object = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    return absl::InvalidArgumentError("JobInfo: not a JSON object");
  }
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (auto it = object.find("state"); it != object.end()) {
    std::optional<v1::JobState> parsed =
        it->is_string() ? ParseJobState(it->get<std::string>()) : std::nullopt;
    if (!parsed.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("JobInfo: unknown state ", it->dump()));
    }
    state = *parsed;
    object.erase(it);
  }
  v1::JobInfo job;
  if (auto s = google::protobuf::util::JsonStringToMessage(object.dump(), &job); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("JobInfo: ", s.message().as_string()));
  }
  job.set_state(state);
  return job;
}

}  // namespace dgt::jobs
