// EtcdJobStateBackend: the jobs service's records (jobs/job_state_backend.h) in etcd v3, for
// dgt-rendezvous --backend=etcd, next to the runs (rendezvous/etcd_run_state_backend.h).
//
// Keys: `<prefix>job/<job id>` and `<prefix>node/<node name>` (default prefix "/dgt/jobs/", apart
// from the runs' "/dgt/runs/", so neither backend reads the other's keys); values as EncodeJob /
// EncodeNode. Each Put / Delete is one etcd Put / DeleteRange; LoadJobs / LoadNodes one Range of
// the prefix (a value that does not decode is skipped with a warning naming the key). Errors from
// etcd (UNAVAILABLE naming each endpoint, from etcd/client.h) come back with the key prefixed.
//
// Replicas (docs/ETCD.md): with Options::leader_key each write is guarded by an etcd::LeaderFence
// (etcd/fence.h) at the term SetLeaderFence gave, as EtcdRunStateBackend's writes are: a replica
// that was deposed can never write a job or node record, so it cannot start or cancel a job a
// second time. Such a write fails FAILED_PRECONDITION "fenced: ..." naming the key and both
// revisions; until SetLeaderFence gives a revision every write is refused so. Reads are not fenced.
//
// Thread-compatible, as JobStateBackend.
#ifndef DGT_JOBS_ETCD_JOB_STATE_BACKEND_H_
#define DGT_JOBS_ETCD_JOB_STATE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "etcd/client.h"
#include "etcd/fence.h"
#include "jobs/job_state_backend.h"

namespace dgt::jobs {

class EtcdJobStateBackend final : public JobStateBackend {
 public:
  struct Options {
    etcd::ClientOptions client;
    // Must be non-empty (never the whole keyspace).
    std::string prefix = "/dgt/jobs/";
    // The replicas' leader key (etcd::LeaderKeyFor), or empty: writes are not fenced.
    std::string leader_key;
  };
  // Connects (lazily, as the etcd client does). Errors: InvalidArgument for an empty prefix or
  // bad client options.
  static absl::StatusOr<std::unique_ptr<EtcdJobStateBackend>> Open(Options options);

  absl::Status PutJob(const v1::JobInfo& job) override;
  absl::Status DeleteJob(absl::string_view job_id) override;
  absl::Status PutNode(const v1::NodeInfo& node) override;
  absl::Status DeleteNode(absl::string_view node_name) override;
  absl::StatusOr<std::vector<v1::JobInfo>> LoadJobs() override;
  absl::StatusOr<std::vector<v1::NodeInfo>> LoadNodes() override;

  // The create_revision of the leader key this replica holds (its term), or 0 when it holds none
  // (every write is then refused). Only with Options::leader_key. Thread-safe.
  void SetLeaderFence(int64_t create_revision) { fence_.set_term(create_revision); }

  std::string JobKey(absl::string_view job_id) const;
  std::string NodeKey(absl::string_view node_name) const;

 private:
  EtcdJobStateBackend(Options options, std::unique_ptr<etcd::Client> client)
      : options_(std::move(options)),
        client_(std::move(client)),
        fence_(options_.leader_key, "jobs") {}
  absl::Status Put(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key, absl::string_view what);
  absl::StatusOr<std::vector<etcd::KeyValue>> Range(const std::string& prefix);

  Options options_;
  std::unique_ptr<etcd::Client> client_;
  etcd::LeaderFence fence_;  // Off without Options::leader_key.
};

}  // namespace dgt::jobs

#endif  // DGT_JOBS_ETCD_JOB_STATE_BACKEND_H_
