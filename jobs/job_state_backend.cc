#include "jobs/job_state_backend.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "jobs/job_state.h"
#include "nlohmann/json.hpp"

namespace dgt::jobs {
namespace {

constexpr int kVersion = 1;

// Erases `key`; NotFound ("no <what> '<key>'") when absent.
absl::Status EraseOrNotFound(std::map<std::string, std::string, std::less<>>& records,
                             absl::string_view key, absl::string_view what) {
  auto it = records.find(key);
  if (it == records.end()) return absl::NotFoundError(absl::StrCat("no ", what, " '", key, "'"));
  records.erase(it);
  return absl::OkStatus();
}

// `json`: the record's object, one line of JSON.
std::string Encode(const std::string& json, const char* field) {
  nlohmann::ordered_json out;
  out["version"] = kVersion;
  out[field] = nlohmann::ordered_json::parse(json);
  return out.dump();
}

// The record's `field` object, one line of JSON.
absl::StatusOr<std::string> Decode(absl::string_view value, const char* field) {
  nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("job state record: not a JSON object");
  }
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return absl::InvalidArgumentError("job state record: no integer \"version\"");
  }
  if (j["version"].get<int>() != kVersion) {
    return absl::UnimplementedError(absl::StrCat(
        "job state record: version ", j["version"].get<int>(), ", this dgt reads ", kVersion));
  }
  if (!j.contains(field) || !j[field].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("job state record: no \"", field, "\" object"));
  }
  return j[field].dump();
}

int64_t IdNumber(const std::string& id) {
  absl::string_view v = id;
  int64_t n = 0;
  if (absl::ConsumePrefix(&v, "job-") && absl::SimpleAtoi(v, &n)) return n;
  return INT64_MAX;
}

}  // namespace

std::string EncodeJob(const v1::JobInfo& job) {
  return Encode(JobInfoToJson(job, /*all_fields=*/false), "job");
}

std::string EncodeNode(const v1::NodeInfo& node) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(node, &json, options);
  return Encode(json, "node");
}

absl::StatusOr<v1::JobInfo> DecodeJob(absl::string_view value) {
  absl::StatusOr<std::string> json = Decode(value, "job");
  if (!json.ok()) return json.status();
  absl::StatusOr<v1::JobInfo> job = JobInfoFromJson(*json);
  if (!job.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job state record: \"job\": ", job.status().message()));
  }
  return job;
}

absl::StatusOr<v1::NodeInfo> DecodeNode(absl::string_view value) {
  absl::StatusOr<std::string> json = Decode(value, "node");
  if (!json.ok()) return json.status();
  v1::NodeInfo node;
  auto s = google::protobuf::util::JsonStringToMessage(*json, &node);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job state record: \"node\": ", s.message().as_string()));
  }
  return node;
}

void SortBySubmission(std::vector<v1::JobInfo>* jobs) {
  std::stable_sort(jobs->begin(), jobs->end(), [](const v1::JobInfo& a, const v1::JobInfo& b) {
    return std::make_tuple(a.submitted_unix_s(), IdNumber(a.job_id()), a.job_id()) <
           std::make_tuple(b.submitted_unix_s(), IdNumber(b.job_id()), b.job_id());
  });
}

absl::Status InMemoryJobStateBackend::PutJob(const v1::JobInfo& job) {
  jobs_[job.job_id()] = EncodeJob(job);
  return absl::OkStatus();
}

absl::Status InMemoryJobStateBackend::DeleteJob(absl::string_view job_id) {
  return EraseOrNotFound(jobs_, job_id, "job");
}

absl::Status InMemoryJobStateBackend::PutNode(const v1::NodeInfo& node) {
  nodes_[node.node_name()] = EncodeNode(node);
  return absl::OkStatus();
}

absl::Status InMemoryJobStateBackend::DeleteNode(absl::string_view node_name) {
  return EraseOrNotFound(nodes_, node_name, "node");
}

absl::StatusOr<std::vector<v1::JobInfo>> InMemoryJobStateBackend::LoadJobs() {
  std::vector<v1::JobInfo> out;
  for (const auto& [id, value] : jobs_) {
    if (auto job = DecodeJob(value); job.ok()) out.push_back(*std::move(job));
  }
  SortBySubmission(&out);
  return out;
}

absl::StatusOr<std::vector<v1::NodeInfo>> InMemoryJobStateBackend::LoadNodes() {
  std::vector<v1::NodeInfo> out;
  for (const auto& [name, value] : nodes_) {
    if (auto node = DecodeNode(value); node.ok()) out.push_back(*std::move(node));
  }
  return out;
}

}  // namespace dgt::jobs
