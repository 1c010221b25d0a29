#include "jobs/etcd_job_state_backend.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dgt::jobs {
namespace {

// The records that decode; one that does not is logged and skipped.
template <typename T, typename Decode>
std::vector<T> DecodeAll(const std::vector<etcd::KeyValue>& kvs, Decode decode) {
  std::vector<T> out;
  for (const etcd::KeyValue& kv : kvs) {
    absl::StatusOr<T> record = decode(kv.value);
    if (!record.ok()) {
      spdlog::warn("etcd job state: skipping {}: {}", kv.key,
                   std::string(record.status().message()));
      continue;
    }
    out.push_back(*std::move(record));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdJobStateBackend>> EtcdJobStateBackend::Open(Options options) {
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("etcd job state: the key prefix must not be empty");
  }
  auto client = etcd::Client::Create(options.client);
  if (!client.ok()) return client.status();
  return std::unique_ptr<EtcdJobStateBackend>(
      new EtcdJobStateBackend(std::move(options), *std::move(client)));
}

std::string EtcdJobStateBackend::JobKey(absl::string_view job_id) const {
  return absl::StrCat(options_.prefix, "job/", job_id);
}

std::string EtcdJobStateBackend::NodeKey(absl::string_view node_name) const {
  return absl::StrCat(options_.prefix, "node/", node_name);
}

absl::Status EtcdJobStateBackend::Put(const std::string& key, const std::string& value) {
  absl::StatusOr<int64_t> written = fence_.Write(*client_, etcd::Op::Put(key, value));
  if (absl::IsFailedPrecondition(written.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(written.status().message(), " (put of ", key, ")"));
  }
  if (!written.ok()) {
    return absl::Status(written.status().code(), absl::StrCat("etcd job state: put of ", key, ": ",
                                                              written.status().message()));
  }
  return absl::OkStatus();
}

absl::Status EtcdJobStateBackend::Delete(const std::string& key, absl::string_view what) {
  absl::StatusOr<int64_t> deleted = fence_.Write(*client_, etcd::Op::Delete(key));
  if (absl::IsFailedPrecondition(deleted.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(deleted.status().message(), " (delete of ", key, ")"));
  }
  if (!deleted.ok()) {
    return absl::Status(deleted.status().code(), absl::StrCat("etcd job state: delete of ", key,
                                                              ": ", deleted.status().message()));
  }
  if (*deleted == 0) return absl::NotFoundError(absl::StrCat("no ", what, " (key ", key, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<etcd::KeyValue>> EtcdJobStateBackend::Range(const std::string& prefix) {
  auto range = client_->GetPrefix(prefix);
  if (!range.ok()) {
    return absl::Status(range.status().code(), absl::StrCat("etcd job state: read of ", prefix,
                                                            ": ", range.status().message()));
  }
  return std::move(range->kvs);
}

absl::Status EtcdJobStateBackend::PutJob(const v1::JobInfo& job) {
  return Put(JobKey(job.job_id()), EncodeJob(job));
}

absl::Status EtcdJobStateBackend::DeleteJob(absl::string_view job_id) {
  return Delete(JobKey(job_id), absl::StrCat("job '", job_id, "'"));
}

absl::Status EtcdJobStateBackend::PutNode(const v1::NodeInfo& node) {
  return Put(NodeKey(node.node_name()), EncodeNode(node));
}

absl::Status EtcdJobStateBackend::DeleteNode(absl::string_view node_name) {
  return Delete(NodeKey(node_name), absl::StrCat("node '", node_name, "'"));
}

absl::StatusOr<std::vector<v1::JobInfo>> EtcdJobStateBackend::LoadJobs() {
  auto kvs = Range(JobKey(""));
  if (!kvs.ok()) return kvs.status();
  std::vector<v1::JobInfo> out = DecodeAll<v1::JobInfo>(*kvs, DecodeJob);
  SortBySubmission(&out);
  return out;
}

absl::StatusOr<std::vector<v1::NodeInfo>> EtcdJobStateBackend::LoadNodes() {
  auto kvs = Range(NodeKey(""));
  if (!kvs.ok()) return kvs.status();
  return DecodeAll<v1::NodeInfo>(*kvs, DecodeNode);
}

}  // namespace dgt::jobs
