// The jobs service (dgt.jobs.v1.Jobs; jobs.proto, docs/JOBS.md) that dgt-rendezvous serves next
// to the rendezvous, on the same port. Node daemons (dgt-agent) hold a Register stream each, and
// `dgt submit / jobs / job show / logs / cancel / nodes` call the unary RPCs. The decisions are
// the pure Scheduler's (jobs/scheduler.h) under one mutex. This layer converts streams to its
// events, sends its Actions and persists its changes in a JobStateBackend. It polls the rendezvous
// for the status of each started job's run (run id = job id). It forwards ReadLog to the node that
// holds the rank, answering when that node's LogChunk comes back or its deadline passes.
//
// Tokens (the jobs contract): Register needs the agents' token (dgt-rendezvous --token-file) when
// there is one. Submit and Cancel need the submit token (--submit-token-file): UNAUTHENTICATED
// without it; with no submit token they are refused PERMISSION_DENIED unless
// allow_unauthenticated_submit. ListJobs, GetJob, ReadLog and ListNodes need the submit token when
// one is set, else nothing.
//
// Replicas (JobsServiceOptions::elected; docs/JOBS.md, "Replicas"): the service follows the
// rendezvous replica's leadership. A standby refuses Register, Submit, Cancel and ReadLog with
// replica::StandbyStatus (UNAVAILABLE with a NotLeader detail, replica/leadership_status.h; the
// daemons and `dgt` move to their next endpoint on UNAVAILABLE), serves ListJobs, GetJob and
// ListNodes from the backend, and schedules nothing. TakeOver reloads the jobs from the backend
// and drops the old leader's node records: nodes count again once their daemons register, and a
// daemon listing a job in running_job_ids is back on it. StepDown ends every Register stream with
// UNAVAILABLE "replica <id> lost its leadership: <why>". A write the backend fences
// (FAILED_PRECONDITION, jobs/etcd_job_state_backend.h) steps the service down and calls on_fenced;
// records are written before the StartJob / CancelJob they decide is sent, so a deposed replica
// never sends one.
//
// Thread-safety: thread-safe (gRPC callback reactors; no reactor thread blocks).
#ifndef DGT_JOBS_JOBS_SERVICE_H_
#define DGT_JOBS_JOBS_SERVICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "jobs/job_state_backend.h"
#include "jobs/scheduler.h"
#include "run_status/run_status.h"

namespace dgt::jobs {

struct JobsServiceOptions {
  // The agents' bearer token (Register); empty: none.
  std::string agent_token;
  // The submit token (Submit, Cancel, and the reads); empty: none.
  std::string submit_token;
  // Without a submit token: accept Submit and Cancel from anyone (tests, one-machine trials).
  bool allow_unauthenticated_submit = false;
  // Where jobs and nodes are kept (not owned; must outlive the service). Null: in memory.
  JobStateBackend* backend = nullptr;
  // The status of a rendezvous run (the server layer wires RendezvousService::RunStatusOf),
  // nullopt when unknown.
  std::function<std::optional<rendezvous::RunStatus>(const std::string&)> run_status;
  // How often started jobs' runs are polled.
  absl::Duration poll_interval = absl::Seconds(1);
  // How long ReadLog waits for the node's LogChunk (DEADLINE_EXCEEDED after).
  absl::Duration log_timeout = absl::Seconds(10);
  // Scheduler options; rdzv_endpoint may also be set later (set_rdzv_endpoint). Its
  // lost_node_grace (10 s) is how long a node lost mid-job has to come back with the job.
  SchedulerOptions scheduler;
  // One of several replicas (RendezvousServerOptions::elected): start as a standby, serve after
  // TakeOver. `replica_id` names it in messages. `on_fenced` is called (under the service's mutex:
  // it must not call back into this service; etcd::LeaderElection::Resign does not) when a write
  // was fenced, after the service stepped down.
  bool elected = false;
  std::string replica_id;
  std::function<void(const absl::Status&)> on_fenced;
};

class JobsService final : public v1::Jobs::CallbackService {
 public:
  // Loads the jobs from the backend (node records of an earlier service are dropped: nodes count
  // once they register again); with `elected` it loads nothing and starts as a standby (TakeOver
  // loads). Errors: the backend's.
  static absl::StatusOr<std::unique_ptr<JobsService>> Create(JobsServiceOptions options);
  ~JobsService() override;

  // The host:port StartJob names for dgt-run (known once the server is bound).
  void set_rdzv_endpoint(const std::string& endpoint);
  // Stops the poll thread and fails pending log reads; call before the server shuts down.
  void Stop();

  // Replicas (see the top): this replica leads now. Reloads jobs and nodes from the backend (the
  // node records are deleted: nodes count once they register again). Errors: the backend's (the
  // service then stays a standby).
  absl::Status TakeOver();
  // This replica no longer leads: `message` ends each Register stream (UNAVAILABLE) and pending
  // log reads; the service refuses as a standby. Idempotent.
  void StepDown(const std::string& message);
  // As a standby: the leader's address (empty: none now), for the refusal's message.
  void SetLeader(const std::string& address);
  bool is_leader();
  // This replica's name in messages (dgt-rendezvous sets its default, HOSTNAME:PORT, once the
  // port is bound, before the election starts), as RendezvousService::SetReplicaId.
  void SetReplicaId(std::string replica_id);

  grpc::ServerBidiReactor<v1::NodeMessage, v1::ControlMessage>* Register(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::JobInfo* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const v1::CancelRequest* request,
                                   v1::JobInfo* response) override;
  grpc::ServerUnaryReactor* ReadLog(grpc::CallbackServerContext* context,
                                    const v1::ReadLogRequest* request,
                                    v1::ReadLogResponse* response) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;

 private:
  class NodeReactor;
  struct PendingLog {
    grpc::ServerUnaryReactor* reactor = nullptr;
    v1::ReadLogResponse* response = nullptr;
    std::string node;
    std::string job_id;
    absl::Time deadline;
  };

  explicit JobsService(JobsServiceOptions options);
  // Which token a call needs: "" when none; the status to refuse with otherwise.
  grpc::Status CheckSubmitter(const grpc::CallbackServerContext* context, bool writes) const;
  // A Register stream's messages.
  grpc::Status OnHello(NodeReactor* reactor, const v1::NodeHello& hello);
  void OnNodeMessage(NodeReactor* reactor, const v1::NodeMessage& message);
  void OnNodeGone(NodeReactor* reactor);
  void Dispatch(std::vector<Action> actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what changed; false when a write was fenced (the service then stepped down: send
  // nothing that was decided).
  bool Persist() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persist, then Dispatch when nothing was fenced.
  bool PersistAndDispatch(std::vector<Action> actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepDownLocked(const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fenced write (FAILED_PRECONDITION: another replica leads): steps down, tells on_fenced and
  // returns true; false for any other status.
  bool FencedLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // replica::StandbyStatus for this replica: a standby's refusal.
  grpc::Status StandbyStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PollLoop();

  JobsServiceOptions options_;
  std::unique_ptr<JobStateBackend> owned_backend_;
  JobStateBackend* backend_;
  dgt::Mutex mu_;
  dgt::CondVar cv_;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeReactor*> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, PendingLog> pending_logs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  std::string step_down_message_ ABSL_GUARDED_BY(mu_);  // The last StepDownLocked's.
  // Jobs whose record the last Persist could not write (not fenced: etcd did not answer, so the
  // write may or may not have been applied), with why. A Submit or Cancel of one of them is not
  // acknowledged: its caller learns that the outcome is unknown.
  absl::flat_hash_map<std::string, std::string> unsaved_jobs_ ABSL_GUARDED_BY(mu_);
  std::thread poller_;
};

}  // namespace dgt::jobs

#endif  // DGT_JOBS_JOBS_SERVICE_H_
