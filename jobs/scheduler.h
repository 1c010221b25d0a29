// The jobs scheduler of dgt-rendezvous (dgt.jobs.v1; docs/JOBS.md): which node daemons are
// registered, which jobs are queued or running where, and what to tell which node. Pure: no I/O,
// no threads, no clock — the caller (JobsService) passes `now`, sends the returned Actions on the
// nodes' Register streams, and persists what TakeChanges() names.
//
// The rules (jobs.proto's comments are the contract):
// - Queue: FIFO with gang placement. A job starts only when instance_count registered, idle, not
//   draining nodes carry every one of its node_labels; it takes the first such nodes by node name.
//   The first queued job that cannot be placed blocks the ones behind it (no starvation of large
//   jobs); its reason says what it needs ("needs 2 idle nodes with labels {gpu=a100}; 1 match"),
//   the ones behind say whom they wait for.
// - States: queued -> starting (StartJob sent to each chosen node) -> running (every node reported
//   "started", or the run formed a round) -> succeeded / failed / cancelled.
// - The run of a job is the rendezvous run with run id = job id (each node runs dgt-run for it):
//   its status (OnRunStatus) gives the restarts, the node ranks (first_rank = node rank x
//   process_count_per_instance) and, when it ends, its outcome, the root cause of a failure.
// - A node's "exited" update frees the node. When every node of a job has exited (or is gone:
//   its stream broke and it did not come back with the job), the job ends: succeeded if every
//   exit code was 0, else failed; the reason is the run's failed outcome, else the first failure
//   in time ("node b: dgt-run exited with code 1: ..."). A node that failed while the job was
//   still starting (it could not start dgt-run) cancels the job's other nodes: without it their
//   run can never form.
// - A node lost mid-job (Deregister: its stream broke) leaves the job as it is: what happens to the
//   run is dgt-run's rendezvous' decision (a restart with the survivors, or a failure). A daemon
//   that registers again listing the job in running_job_ids is back on it; one that does not list
//   it is gone from it. A listed job that is unknown or finished is cancelled on that node.
// - Cancel: a queued job ends at once; a starting or running one is "cancelled" at once and each
//   of its nodes still running gets CancelJob; the nodes stay busy until they report "exited".
//
// Thread-compatible: JobsService serialises calls under its mutex.
#ifndef DGT_JOBS_SCHEDULER_H_
#define DGT_JOBS_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dgt/jobs/v1/jobs.pb.h"
#include "rendezvous/types.h"

namespace dgt::jobs {

// A message for one node's Register stream.
struct Action {
  std::string node;
  v1::ControlMessage message;
};

struct SchedulerOptions {
  // host:port of the rendezvous service, sent in every StartJob (dgt-run --rdzv-endpoint).
  std::string rdzv_endpoint;
  // CancelJob grace when a Cancel asks for 0 (seconds; jobs.proto: 30 s).
  double default_grace_s = 30;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);

  void set_rdzv_endpoint(const std::string& endpoint) { options_.rdzv_endpoint = endpoint; }

  // Takes back jobs persisted by an earlier service (JobStateBackend::LoadJobs), in submission
  // order; the next job id follows the highest "job-<n>". Jobs that were starting or running wait
  // for their nodes to register again. Call before anything else.
  void Restore(const std::vector<v1::JobInfo>& jobs);

  // Queues a job (Validate()d first: InvalidArgument naming the field) and places what can be
  // placed. Returns the new job id ("job-<n>", n from 1).
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec, absl::Time now,
                                     std::vector<Action>* out);
  // A daemon's NodeHello. Errors: AlreadyExists when a node of that name is registered;
  // InvalidArgument for an empty node name.
  absl::Status Register(const v1::NodeHello& hello, absl::Time now, std::vector<Action>* out);
  // The node's stream broke (or it ended): it is no longer registered.
  void Deregister(const std::string& node, absl::Time now, std::vector<Action>* out);
  // The daemon is draining: it takes no new job.
  void Drain(const std::string& node, absl::Time now, std::vector<Action>* out);
  // A JobUpdate from `node`. Errors: NotFound for a job that is unknown or not on that node
  // (nothing changes).
  absl::Status OnUpdate(const std::string& node, const v1::JobUpdate& update, absl::Time now,
                        std::vector<Action>* out);
  // The status of the run with the job's id (RoundStateMachine::Status); ignored for a job that
  // is not starting or running.
  void OnRunStatus(const rendezvous::RunStatus& run, absl::Time now);
  // Cancels a job. `grace_s` 0: default_grace_s. Errors: NotFound (unknown id);
  // FailedPrecondition naming the state of a job that already finished.
  absl::StatusOr<v1::JobInfo> Cancel(const std::string& job_id, double grace_s, absl::Time now,
                                     std::vector<Action>* out);

  // Where global rank `rank` of a job ran: its node and local rank. Errors: NotFound for an
  // unknown job, or a rank that no node of it holds (ranks are known once its run formed).
  struct LogTarget {
    std::string node;
    int32_t local_rank = 0;
  };
  absl::StatusOr<LogTarget> LogTargetFor(const std::string& job_id, int32_t rank) const;

  const v1::JobInfo* FindJob(const std::string& job_id) const;
  // Every job, in submission order.
  std::vector<v1::JobInfo> Jobs() const;
  // Registered nodes, by name.
  std::vector<v1::NodeInfo> Nodes() const;
  bool IsRegistered(const std::string& node) const { return nodes_.contains(node); }
  // Jobs whose run status matters (starting, running, or cancelled with nodes still running).
  std::vector<std::string> ActiveJobIds() const;
  static bool Terminal(const std::string& state);

  // What changed since the last call, for the caller to persist: job ids and node names written,
  // and nodes deregistered.
  struct Changes {
    std::set<std::string> jobs;
    std::set<std::string> nodes;
    std::set<std::string> removed_nodes;
  };
  Changes TakeChanges();

 private:
  struct Job {
    v1::JobInfo info;
    std::set<std::string> started;  // Nodes that reported "started".
    std::set<std::string> gone;     // Nodes lost without the job.
    std::string first_failure;      // The first failure in time.
    std::string run_failure;        // The run's failed outcome, without "failed: ".
  };
  struct Node {
    v1::NodeInfo info;
    bool draining = false;
  };

  Job* MutableJob(const std::string& job_id);
  Node* MutableNode(const std::string& node);
  v1::JobNode* JobNodeOf(Job& job, const std::string& node);
  // Places queued jobs in order until one cannot be placed.
  void Place(absl::Time now, std::vector<Action>* out);
  bool Matches(const v1::JobSpec& spec, const Node& node) const;
  // Ends the job when each of its nodes exited or is gone.
  void MaybeFinish(Job& job, absl::Time now);
  void Finish(Job& job, const std::string& state, const std::string& reason, absl::Time now);
  // CancelJob to every node of `job` still running it (registered, not exited).
  void CancelNodes(Job& job, double grace_s, std::vector<Action>* out);
  void FreeNode(const std::string& node, const std::string& job_id);
  void SetNodeState(Node& node);

  SchedulerOptions options_;
  std::map<std::string, Job> jobs_;
  std::vector<std::string> order_;  // Submission order.
  std::map<std::string, Node> nodes_;
  int64_t next_id_ = 1;
  Changes changes_;
};

}  // namespace dgt::jobs

#endif  // DGT_JOBS_SCHEDULER_H_
