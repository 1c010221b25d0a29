// Agent: one node of a job. Joins the run at the rendezvous service, hosts the job's store when it
// is node rank 0, starts and supervises this node's workers with the env contract, and reports
// the outcome. The same class backs `dgt-run` (foreground) and, later, the daemon.
//
// Everything happens on one event loop (boost::asio): rendezvous messages, worker exits, worker
// output, signals and timers. What to do on each of those is NodeLifecycle's decision
// (agent/lifecycle/node_lifecycle.h, pure, unit-tested on a simulated clock): the Agent hands it
// every event and carries out the actions it returns (Execute) through its parts: PrepareNode
// (agent/node_setup.h) before the loop, the Coordinator (agent/coord/: the rendezvous session or
// the static backend) and NodeWorkers (agent/workers/node_workers.h). Thread-compatible: Run()
// once, from one thread.
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
#include "agent/coord/rendezvous_coordinator.h"
#include "agent/coord/rendezvous_session.h"
#include "agent/coord/round_marks.h"
#include "agent/coord/tf_cluster.h"
#include "agent/coord/tf_exchange.h"
#include "agent/flags/launch_options.h"
#include "agent/health/builtin_checks.h"
#include "agent/health/health_monitor.h"
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
  // (69 rendezvous unavailable, 71 a health check failed, 75 join timeout, 77 not admitted,
  // 1 other).
  int Run();

 private:
  // PrepareNode (agent/node_setup.h), then the coordinator: the static backend starts, or the
  // rendezvous session opens (blocks up to --rdzv-connect-timeout) and this node joins. Errors:
  // InvalidArgument for a bad flag value (exit 2); anything else with `*exit_status` the status to
  // exit with.
  absl::Status Prepare(int* exit_status);
  // The lifecycle (agent/lifecycle/node_lifecycle.h) for this node, once Prepare knows its
  // addresses; bound to the worker side and the rendezvous coordinator.
  void CreateLifecycle(RestartBackend backend, const std::string& endpoints);
  NodeState state() const { return lifecycle_->state(); }
  // Carries out the lifecycle's actions, in order, then arms the timer for its next deadline.
  void Execute(const LifecycleActions& actions);
  void Carry(const LifecycleAction& action);
  template <typename A>
  void CarryOne(const A& action);
  void ArmLifecycleTimer();
  // ApplyAssignment: the held assignment of the service (or the static backend's one round).
  void ApplyHeld(const actions::ApplyAssignment& action);
  // The round of `assignment_` for the lifecycle; `in_place`: the service's Assignment.in_place.
  RoundAssignment CurrentRound(const std::string& reason, bool in_place = false) const;
  // Sets up the logs for `assignment_`, then its round starts (NodeLifecycle::OnRoundApplied).
  void BeginRun(const std::string& reason, bool in_place = false);
  // Takes `assignment` as this node's round: the store it names (when this node is node rank 0)
  // becomes the round's store and a fresh standby store is announced; workers start.
  void ApplyAssignment(const rdzv_v1::Assignment& assignment);
  // An in-place round this node's running workers go on in (ApplyAssignment with keep_workers):
  // takes its round number; the workers, the stores and the layout stay.
  void KeepRound(const rdzv_v1::Assignment& assignment);
  // Ends the agent with `exit_status` (NodeLifecycle::Finish, then Terminate).
  void Finish(int exit_status, const std::string& message);
  // Finish: prints the outcome (and the failure summary), stops every timer and the loop.
  void Terminate(int exit_status, const std::string& message);
  // Stops the loop once the done marks are written (at most 3 s from now): the agent exits.
  void FlushAndStop();
  void WaitForSignals();
  // The node's health checks (HealthMonitor): one round now, before the join. Returns the
  // failure message, nullopt when healthy.
  std::optional<std::string> CheckHealthBeforeJoin();

  LaunchOptions options_;
  AgentEnv env_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::signal_set signals_;
  // Armed at NodeLifecycle::NextDeadline (join timeout, wait for a round, drain bound).
  boost::asio::steady_timer lifecycle_timer_;
  std::unique_ptr<NodeLifecycle> lifecycle_;
  int exit_status_ = 1;
  std::string advertised_address_;
  // The standby store: listening, never used by a round; its port is what the rendezvous may
  // name as MASTER_PORT next. The static backend's store on node rank 0.
  std::unique_ptr<store::Server> store_;
  int64_t round_ = -1;
  NodeAssignment assignment_;
  // The worker side: groups, logs, failures, spawning and rank restarts.
  NodeWorkers workers_;
  // The rendezvous session's side (RendezvousCoordinator) or the static backend (StaticBackend).
  std::unique_ptr<Coordinator> coordinator_;
  // coordinator_ when it is the rendezvous service's; null for the static backend.
  RendezvousCoordinator* rdzv_ = nullptr;
  // Node health checks: a round before the join, then every --health-interval off the loop.
  std::unique_ptr<HealthFs> health_fs_;
  std::unique_ptr<HealthMonitor> health_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_H_
