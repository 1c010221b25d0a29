// The jobs scheduler of dgt-rendezvous (dgt.jobs.v1): which node daemons are registered, which
// jobs are queued or running where, and what to tell which node. Its rules are in docs/JOBS.md
// ("The scheduler's rules"); jobs.proto's comments are the wire contract.
//
// Pure: no I/O, no threads, no clock. The caller (JobsService) passes `now`, sends the returned
// Actions on the nodes' Register streams, and persists what TakeChanges() names. Errors come back
// as absl::Status; a call that returns an error changes nothing.
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
#include "run_status/run_status.h"

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
  // How long a node lost mid-job may take to register again listing the job. After it, the job
  // replaces the node or fails (docs/JOBS.md).
  absl::Duration lost_node_grace = absl::Seconds(10);
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);

  void set_rdzv_endpoint(const std::string& endpoint) { options_.rdzv_endpoint = endpoint; }

  // Takes back jobs persisted by an earlier service (JobStateBackend::LoadJobs), in submission
  // order; the next job id follows the highest "job-<n>". Jobs that were starting or running wait
  // for their nodes to register again: each node not back is lost mid-job at `now` (the
  // lost_node_grace rules), so a job does not end on one node's exit while another node's daemon
  // is still on its way back. Call before anything else.
  void Restore(const std::vector<v1::JobInfo>& jobs, absl::Time now);

  // Queues a job (Validate()d first: InvalidArgument naming the field) and places what can be
  // placed. Returns the new job id ("job-<n>", n from 1); the job's uid is 128 random bits as
  // 32 lowercase hex digits.
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec, absl::Time now,
                                     std::vector<Action>* out);
  // A daemon's NodeHello. Errors: AlreadyExists when a node of that name is registered;
  // InvalidArgument for an empty node name.
  absl::Status Register(const v1::NodeHello& hello, absl::Time now, std::vector<Action>* out);
  // The node's stream broke (or it ended): it is no longer registered.
  void Deregister(const std::string& node, absl::Time now, std::vector<Action>* out);
  // The daemon is draining: it takes no new job.
  void Drain(const std::string& node, absl::Time now, std::vector<Action>* out);
  // The node's health, from its daemon's NodeHealth (NodeHello carries it too, for Register). An
  // unhealthy node takes no new job and no replacement part; a job it runs goes on (docs/JOBS.md).
  // `reason`: "health check 'NAME' failed: REASON". An unknown node: nothing.
  void SetHealth(const std::string& node, bool unhealthy, const std::string& reason, absl::Time now,
                 std::vector<Action>* out);
  // A JobUpdate from `node`. Errors: NotFound for a job that is unknown or not on that node;
  // InvalidArgument for an event other than JOB_EVENT_STARTED or JOB_EVENT_EXITED.
  absl::Status OnUpdate(const std::string& node, const v1::JobUpdate& update, absl::Time now,
                        std::vector<Action>* out);
  // Ends the lost_node_grace of nodes lost mid-job (replacing them or failing their job); call
  // about once a second.
  void Tick(absl::Time now, std::vector<Action>* out);
  // When the next lost_node_grace ends (InfiniteFuture when no node is lost): Tick then.
  absl::Time NextTick() const;
  // The status of the run with the job's id (RoundStateMachine::Status; a run the rendezvous does
  // not know: one with only run_id set). Node ranks and restarts are only ever learned, never
  // cleared (a closed run keeps the ranks it had), so `dgt logs --rank` works after the job ended.
  // A job that is not starting or running takes it once after it ended (its final poll: a job
  // over before the 1 s poll still learns its ranks), then ignores it.
  void OnRunStatus(const rendezvous::RunStatus& run, absl::Time now);
  // Cancels a job. `grace_s` 0: default_grace_s. Errors: NotFound (unknown id);
  // FailedPrecondition naming the state of a job that already finished.
  absl::StatusOr<v1::JobInfo> Cancel(const std::string& job_id, double grace_s, absl::Time now,
                                     std::vector<Action>* out);

  // Where global rank `rank` of a job ran: its node and local rank (of two nodes that list the
  // rank, a lost one in its grace and the spare that took it, the one not lost). Errors: NotFound
  // for an unknown job, or a rank that no node of it holds: beyond the job's ranks, not known yet
  // (its run has not formed), or never given (the job ended without its run giving it to a node).
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
  // Jobs whose run status matters: starting, running, or ended and not yet given their final
  // poll (OnRunStatus).
  std::vector<std::string> ActiveJobIds() const;

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
    std::set<std::string> started;           // Nodes that reported JOB_EVENT_STARTED.
    std::set<std::string> gone;              // Nodes lost without the job.
    std::string first_failure;               // The first failure in time.
    std::string run_failure;                 // The run's failed outcome, without "failed: ".
    bool run_closed = false;                 // The run has an outcome (it ended).
    std::map<std::string, absl::Time> lost;  // Nodes lost mid-job: when their stream broke.
    std::set<std::string> to_replace;        // Lost nodes whose replacement waits for a node.
    bool final_poll = false;                 // Ended; its run's status not read since.
  };
  struct Node {
    v1::NodeInfo info;
    bool draining = false;
  };

  Job* MutableJob(const std::string& job_id);
  Node* MutableNode(const std::string& node);
  // `node`'s part in `job`, or nullptr. A part a spare took (taken_by_spare) is history, not the
  // node's part: the node may hold another part of the job since (a replacement).
  v1::JobNode* JobNodeOf(Job& job, const std::string& node);
  // Places queued jobs in order until one cannot be placed.
  void Place(absl::Time now, std::vector<Action>* out);
  bool Matches(const v1::JobSpec& spec, const Node& node) const;
  // Whether `node` may take a new job or part of one: idle, not draining, healthy, labels match.
  bool Usable(const v1::JobSpec& spec, const Node& node) const;
  // Why `spec` cannot be placed now: "needs 2 idle nodes; 1 matches", and the unhealthy nodes
  // with its labels when there are any.
  std::string PendingReason(const v1::JobSpec& spec) const;
  // Ends the job when each of its nodes exited or is gone.
  void MaybeFinish(Job& job, absl::Time now);
  void Finish(Job& job, v1::JobState state, const std::string& reason, absl::Time now);
  // CancelJob to every node of `job` still running it (registered, not exited).
  void CancelNodes(Job& job, double grace_s, std::vector<Action>* out);
  void FreeNode(const std::string& node, const std::string& job_id);
  // `node` of a starting or running `job` lost its processes; `what` says how, for the reason
  // ("its daemon was lost mid-job (...)"). A spare of the job takes its part, else it is replaced,
  // else the job fails (docs/JOBS.md).
  void LoseNode(Job& job, const std::string& node, const std::string& what, absl::Time now,
                std::vector<Action>* out);
  // Starts the job's replacement for lost `node` on an idle node; false when there is none.
  bool Replace(Job& job, const std::string& node, std::vector<Action>* out);
  void SetNodeState(Node& node);
  // What a node placed on `job` is sent: its id, spec, uid, nodes and submission time.
  Action StartAction(const Job& job, const std::string& node) const;
  // next_id_ past `job_id` when it is "job-<n>".
  void FollowId(const std::string& job_id);
  // Takes on the running job that `start` describes, reported by `node` (docs/JOBS.md).
  void Adopt(const v1::StartJob& start, const std::string& node, absl::Time now);
  // A daemon with the same uid as `job` that is not among its nodes: takes the place of a lost
  // node that its StartJob does not name. False when there is none.
  bool JoinAsReplacement(Job& job, const v1::StartJob& start, const std::string& node);

  SchedulerOptions options_;
  std::map<std::string, Job> jobs_;
  std::vector<std::string> order_;  // Submission order.
  std::map<std::string, Node> nodes_;
  int64_t next_id_ = 1;
  Changes changes_;
};

}  // namespace dgt::jobs

#endif  // DGT_JOBS_SCHEDULER_H_
