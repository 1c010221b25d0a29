// Agent: one node of a job. Joins the run at the rendezvous service, hosts the job's store when it
// is node rank 0, starts and supervises this node's workers with the env contract, and reports
// the outcome. The same class backs `dgt-run` (foreground) and, later, the daemon.
//
// Everything happens on one event loop (boost::asio): rendezvous messages, worker exits, worker
// output, signals and timers. What to do on each of those is NodeLifecycle's decision
// (agent/lifecycle/node_lifecycle.h, pure, unit-tested on a simulated clock): the Agent hands it
// every event and carries out the actions it returns (Execute). Thread-compatible: Run() once, from
// one thread.
#ifndef DGT_AGENT_AGENT_H_
#define DGT_AGENT_AGENT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "agent/agent_env.h"
#include "agent/coord/coordinator.h"
#include "agent/coord/done_marks.h"
#include "agent/coord/failure_publisher.h"
#include "agent/coord/rendezvous_session.h"
#include "agent/coord/round_marks.h"
#include "agent/coord/tf_cluster.h"
#include "agent/coord/tf_exchange.h"
#include "agent/flags/launch_options.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/lifecycle/restart_policy.h"
#include "agent/lifecycle/session_policy.h"
#include "agent/workers/error_file.h"
#include "agent/workers/group_watchdog.h"
#include "agent/workers/node_workers.h"
#include "agent/workers/worker_env.h"
#include "agent/workers/worker_group.h"
#include "boost/asio.hpp"
#include "dgt/store/server.h"
#include "rendezvous/service.h"
#include "replica/endpoint_rotation.h"

namespace dgt::agent {

class Agent {
 public:
  // `env`: the clock, the process launcher, the network probe and the store servers
  // (agent/agent_env.h); its objects outlive the Agent.
  explicit Agent(LaunchOptions options, AgentEnv env = AgentEnv::Default());
  ~Agent();

  // Runs the job on this node to its end. Returns the process exit status: 0 when every worker
  // of the run succeeded, else the first failed worker's code (128 + signal number for a
  // signal), 128 + N when stopped by signal N, else a launcher status from agent/exit_codes.h
  // (69 rendezvous unavailable, 75 join timeout, 77 not admitted, 1 other).
  int Run();

 private:
  absl::Status Prepare();
  // The lifecycle (agent/lifecycle/node_lifecycle.h) for this node, once Prepare knows its
  // addresses.
  void CreateLifecycle(RestartBackend backend);
  NodeState state() const { return lifecycle_->state(); }
  // Carries out the lifecycle's actions, in order, then arms the timer for its next deadline.
  void Execute(const LifecycleActions& actions);
  void Carry(const LifecycleAction& action);
  template <typename A>
  void CarryOne(const A& action);
  void ArmLifecycleTimer();
  // SessionBackend's Report: this node's NodeReport to the rendezvous service, with its done
  // mark (after a rejoin when the service is lost).
  void ReportToService(const actions::Report& action);
  // ApplyAssignment: the held assignment of the service (or the static backend's one round).
  void ApplyHeld(const actions::ApplyAssignment& action);
  // The round of `assignment_` for the lifecycle.
  RoundAssignment CurrentRound(const std::string& reason) const;
  int Alive() const { return workers_.alive(); }
  // --rdzv-backend=static with several nodes: no rendezvous service (StaticCoordinator).
  absl::Status PrepareStatic();
  // Sets up the logs for `assignment_`, then its round starts (NodeLifecycle::OnRoundApplied).
  void BeginRun(const std::string& reason);
  // Opens a Session stream to `endpoint` whose callbacks reach this agent's loop while `gen` is
  // the current session generation (a replaced session's late callbacks are dropped). Blocks up
  // to `timeout` (several replicas: gives up at once on a refused connection).
  absl::StatusOr<std::unique_ptr<RendezvousSession>> OpenSession(uint64_t gen,
                                                                 const std::string& endpoint,
                                                                 absl::Duration timeout);
  // Several replicas: opens the first session that connects, trying them in turn
  // (EndpointRotation) until `timeout` (--rdzv-connect-timeout) passes.
  // Errors: DeadlineExceeded naming every replica; Unauthenticated when every failure was a TLS
  // disagreement.
  absl::StatusOr<std::unique_ptr<RendezvousSession>> OpenFirstReplica(absl::Duration timeout);
  // The endpoints for messages: "a:1" or "a:1,b:2".
  std::string EndpointsText() const;
  // The JoinRequest for this node, with JoinRequest.rejoin when it holds a round of the run.
  rdzv_v1::AgentMessage MakeJoin() const;
  std::optional<rdzv_v1::Assignment> RejoinAssignment() const;
  // The service is lost (not hosted by another node), or a session ended before the service
  // took it (a standby replica): workers keep running, and the agent reconnects through the
  // endpoints (replica/endpoint_rotation.h: one endpoint, jittered exponential backoff, 100 ms
  // doubling to 5 s; several, the next one at once, at most 200 ms after a full pass) until
  // --rdzv-conf read_timeout passes (OnReconnectWindowOver).
  void StartReconnect(const grpc::Status& status);
  // The next attempt after `pause`.
  void ScheduleReconnect(absl::Duration pause);
  void TryReconnect();
  void OnReconnectAttempt(uint64_t gen);
  void OnReconnectWindowOver();
  // The service answered the new session: the reconnect window ends.
  void ServiceBack();
  // The service re-attached this node to its round (the Assignment of that round again).
  void OnRejoined();
  bool ServiceLost() const { return session_policy_.lost(); }
  // Writes this node's done mark (agent/coord/done_marks.h) into the round's store.
  void MarkDone(int exit_status);
  // Reads the round's done marks (once; OnMarks schedules the next read while needed).
  void PollMarks();
  void OnMarks();
  // The current round, for its done marks.
  RoundMarks::Round MarksRound() const;
  // Finish, except that node rank 0, which serves the round's store, when the service is lost
  // first keeps the store until every node's done mark is there (and, with `wait_for_seen`, every
  // other node has seen the outcome), at most --rdzv-conf read_timeout.
  void FinishLinger(int exit_status, const std::string& message, bool wait_for_seen = false);
  // The run's outcome learned from the done marks without the service: node rank 0 keeps the
  // store until every other node has seen it; the others write their seen mark and finish.
  void FinishFromMarks(int exit_status, const std::string& message);
  void OnServiceMessage(const rdzv_v1::ServiceMessage& message);
  void OnSessionClosed(const grpc::Status& status);
  void OnAssignment(const rdzv_v1::Assignment& assignment);
  // Takes `assignment` as this node's round: the store it names (when this node is node rank 0)
  // becomes the round's store and a fresh standby store is announced; workers start.
  void ApplyAssignment(const rdzv_v1::Assignment& assignment);
  // This node is no longer part of the run (NodeLifecycle::LeaveRun).
  void LeaveRun(int exit_status, const std::string& message);
  // Ends the agent with `exit_status` (NodeLifecycle::Finish, then Terminate).
  void Finish(int exit_status, const std::string& message);
  // Finish: prints the outcome (and the failure summary), stops every timer and the loop.
  void Terminate(int exit_status, const std::string& message);
  // Stops the loop once marks_ wrote what it holds (its last done or seen mark), at most
  // 3 s from now: the agent exits after that.
  void FlushAndStop();
  void WaitForSignals();

  LaunchOptions options_;
  AgentEnv env_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::signal_set signals_;
  // Armed at NodeLifecycle::NextDeadline (join timeout, wait for a round, drain bound).
  boost::asio::steady_timer lifecycle_timer_;
  std::unique_ptr<NodeLifecycle> lifecycle_;
  int exit_status_ = 1;
  // Losing and reconnecting to the rendezvous service.
  boost::asio::steady_timer reconnect_timer_;
  rendezvous::TlsFiles rdzv_tls_;
  // The rendezvous session's decisions: generation, reconnect window, standby answers, rejoin.
  SessionPolicy session_policy_;
  std::string rdzv_token_;
  grpc::Status closed_status_;  // How the last session ended (Reconnect logs it).
  // The endpoints of --rdzv-endpoint (one, or the replicas of one service) and which is next.
  std::unique_ptr<replica::EndpointRotation> rotation_;
  std::thread reconnect_thread_;  // One connection attempt at a time.
  dgt::Mutex reconnect_mu_;
  std::optional<absl::StatusOr<std::unique_ptr<RendezvousSession>>> reconnect_result_
      ABSL_GUARDED_BY(reconnect_mu_);
  rdzv_v1::Assignment current_assignment_;
  std::optional<rdzv_v1::AgentMessage> last_report_;  // Sent again after a rejoin.
  // Done marks in the round's store, on io_ (no thread). Terminate runs the loop until what it
  // wrote went out (FlushAndStop), so a node's last mark is written.
  RoundMarks marks_;
  // Exit status when Prepare() fails with anything but a bad flag value.
  int prepare_exit_status_ = 1;

  std::unique_ptr<rendezvous::RendezvousServer> embedded_rendezvous_;
  std::string rdzv_endpoint_;  // The endpoint of the current session (rotation_->current()).
  std::string advertised_address_;
  // The standby store: listening, never used by a round; its port is what the rendezvous may
  // name as MASTER_PORT next.
  std::unique_ptr<store::Server> store_;
  // The store serving the current round, when this node is node rank 0.
  std::unique_ptr<store::Server> round_store_;
  int64_t round_ = -1;
  // The service's latest assignment: the lifecycle applies it now or once the workers are gone.
  std::optional<rdzv_v1::Assignment> held_assignment_;
  std::unique_ptr<RendezvousSession> session_;
  // The rendezvous session's side (SessionBackend) or the static backend (StaticBackend).
  std::unique_ptr<Coordinator> coordinator_;
  // The worker side: groups, logs, failures, spawning and rank restarts.
  NodeWorkers workers_;
  // Whether the rendezvous service runs inside another node's agent (Assignment.host_node_id).
  bool HostedByAnotherNode() const;
  std::string HostLostMessage(const grpc::Status& status) const;
  NodeAssignment assignment_;
  // The node whose agent hosts the rendezvous service in-process (c10d-style), empty for
  // dgt-rendezvous: losing that service means that node is gone.
  std::string rdzv_host_node_id_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_H_
