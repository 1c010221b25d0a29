// Where the jobs service keeps its jobs and registered nodes: behind one interface next to the
// rendezvous' RunStateBackend (rendezvous/run_state_backend.h), with the same two homes — in this
// process (InMemoryJobStateBackend) or in etcd (EtcdJobStateBackend,
// jobs/etcd_job_state_backend.h), so that a restarted or replacing dgt-rendezvous (--backend=etcd)
// finds the queue and the jobs' nodes again.
//
// Records: one per job (dgt.jobs.v1.JobInfo) and one per registered node (NodeInfo), each stored
// whole as JSON. EncodeJob / EncodeNode write {"version": 1, "job": {...}} with proto3's JSON
// mapping and the field names of jobs.proto. A job's "state" is its name ("queued";
// jobs/job_state.h), not the enum's. The scheduler writes a record after each event that changed
// it. A record is the unit of consistency (no cross-record transactions). Node records say who
// was registered; after a restart a node counts as registered only once its daemon registers.
//
// Thread-compatible: the caller serialises calls (JobsService under its mutex).
#ifndef DGT_JOBS_JOB_STATE_BACKEND_H_
#define DGT_JOBS_JOB_STATE_BACKEND_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dgt/jobs/v1/jobs.pb.h"

namespace dgt::jobs {

// The stored JSON of a record, and back. Decode errors: InvalidArgument naming what is wrong (a
// job "state" that is not one of JobStateName's words included); Unimplemented for another
// "version".
std::string EncodeJob(const v1::JobInfo& job);
absl::StatusOr<v1::JobInfo> DecodeJob(absl::string_view value);
std::string EncodeNode(const v1::NodeInfo& node);
absl::StatusOr<v1::NodeInfo> DecodeNode(absl::string_view value);

// Jobs in submission order: by submitted_unix_s, then by the number of "job-<n>", then by id.
void SortBySubmission(std::vector<v1::JobInfo>* jobs);

class JobStateBackend {
 public:
  virtual ~JobStateBackend() = default;
  // Writes the job's record (keyed by job_id), replacing any earlier one.
  virtual absl::Status PutJob(const v1::JobInfo& job) = 0;
  // Errors: NotFound.
  virtual absl::Status DeleteJob(absl::string_view job_id) = 0;
  virtual absl::Status PutNode(const v1::NodeInfo& node) = 0;
  // Errors: NotFound.
  virtual absl::Status DeleteNode(absl::string_view node_name) = 0;
  // Every job, in submission order (SortBySubmission). A record that does not decode is skipped
  // (the etcd backend logs it).
  virtual absl::StatusOr<std::vector<v1::JobInfo>> LoadJobs() = 0;
  // Every node record, by name.
  virtual absl::StatusOr<std::vector<v1::NodeInfo>> LoadNodes() = 0;
};

// In this process: the records' JSON in maps (encoded and decoded as etcd's are).
class InMemoryJobStateBackend final : public JobStateBackend {
 public:
  absl::Status PutJob(const v1::JobInfo& job) override;
  absl::Status DeleteJob(absl::string_view job_id) override;
  absl::Status PutNode(const v1::NodeInfo& node) override;
  absl::Status DeleteNode(absl::string_view node_name) override;
  absl::StatusOr<std::vector<v1::JobInfo>> LoadJobs() override;
  absl::StatusOr<std::vector<v1::NodeInfo>> LoadNodes() override;

 private:
  std::map<std::string, std::string, std::less<>> jobs_;
  std::map<std::string, std::string, std::less<>> nodes_;
};

}  // namespace dgt::jobs

#endif  // DGT_JOBS_JOB_STATE_BACKEND_H_
