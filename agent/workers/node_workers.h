// NodeWorkers: this node's worker side. Owns the current WorkerGroup and the replaced ones, the
// process-group watchdog, the launch's log directory and filtered logs, the failures the
// summary names, the network environment for NCCL, the TensorFlow address exchange, the
// failure publisher and the hang monitor (agent/progress/hang_monitor.h). Makes each worker's
// spec, starts a round's workers in batches and restarts single ranks in place.
//
// Decides nothing: what to do next is the NodeLifecycle's (agent/lifecycle/node_lifecycle.h);
// NodeWorkers asks it at each worker event and hands the returned actions to the sink.
// Thread-compatible: used from the agent's event loop only.
#ifndef DGT_AGENT_WORKERS_NODE_WORKERS_H_
#define DGT_AGENT_WORKERS_NODE_WORKERS_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/agent_env.h"
#include "agent/coord/failure_publisher.h"
#include "agent/coord/tf_exchange.h"
#include "agent/flags/launch_options.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/progress/hang_monitor.h"
#include "agent/workers/error_file.h"
#include "agent/workers/group_watchdog.h"
#include "agent/workers/worker_env.h"
#include "agent/workers/worker_group.h"
#include "boost/asio.hpp"

namespace dgt::agent {

class NodeWorkers {
 public:
  // Where the lifecycle's answers go: the Agent carries them out.
  using Sink = std::function<void(const LifecycleActions&)>;

  // `options`, `env` and `assignment` (this node's current round) outlive this object.
  // `store_timeout`: connecting to the round's store and each request (TensorFlow addresses).
  NodeWorkers(boost::asio::io_context& io, const LaunchOptions& options, const AgentEnv& env,
              const NodeAssignment& assignment, absl::Duration store_timeout, Sink sink);
  ~NodeWorkers();

  // The lifecycle asked at each worker event; not owned, outlives this object. Before any round.
  void Bind(NodeLifecycle* lifecycle) { lifecycle_ = lifecycle; }

  // Forks the watchdog. Before any thread starts. Errors: what fork or its pipe reported.
  absl::Status StartWatchdog() { return watchdog_.Start(); }
  // Registers (`watch`) or unregisters a process group the agent started besides its workers (a
  // health check's), so that it does not outlive the agent. Any thread (one pipe write).
  void WatchGroup(pid_t pgid, bool watch) {
    if (watch) {
      watchdog_.Register(pgid);
    } else {
      watchdog_.Unregister(pgid);
    }
  }
  // Creates this launch's log directory for the first round (--log-dir, else a temporary one).
  // Errors: FailedPrecondition with the message to finish with (exit 1).
  absl::Status SetUpLogs();
  // --distribution tensorflow: reserves this node's worker ports on `address`.
  absl::Status ReserveTfPorts(const std::string& address);
  // Takes the NCCL network variables for `master_addr` (probed once per address).
  void UpdateNetworkEnv(const std::string& master_addr);

  // StartRound: starts every local worker of round `round` with TORCHELASTIC_RESTART_COUNT
  // `restart_count`. The single entry point for first starts, group restarts and new rounds.
  // `replacing` (an in-place round: this node took a lost node's place): first publishes each
  // local rank's failure into the round's store, one after the other, as for a rank restarted
  // in place, so that the survivors' trainers rebuild with these workers as the replacements;
  // a failed publication is logged and the start goes on.
  void StartRound(int restart_count, int64_t round, bool replacing = false);
  // A hot spare waiting for a lost node's place, under --restart-policy rank in replace mode with
  // a Python command: starts the processes its ranks would start from now, from the workers'
  // command and environment without a rank (--standby-workers standbys, else the fork server
  // when --fork-server is on), so that the round it gets starts them warm (StartRound takes
  // each rank from WorkerGroup::StartReplacement: a ready standby, the fork server, or a fresh
  // process). Once per agent, before its first round; a failure is logged and the round starts
  // fresh processes.
  void PrepareSpare();
  bool has_group() const { return group_ != nullptr; }
  // Workers of the current group still running (0 without a group).
  int alive() const { return group_ ? group_->alive() : 0; }
  // actions::StopWorkers: SIGTERM (or `signal` when not 0), SIGKILL after --stop-timeout.
  void Stop(int signal);
  void KillAll();
  void Signal(int signal);
  // actions::WatchDrain: `done` once every worker of the group is gone.
  void OnDrained(std::function<void()> done);
  // actions::RecordFailure and ClearFailures. `root_cause`: first in the summary.
  void RecordFailure(const WorkerExit& exit, bool recovered, bool root_cause);
  void ClearFailures() { failures_.clear(); }
  bool has_failures() const { return !failures_.empty(); }
  // actions::PublishFailure: publishes the failure of `exit`'s rank into the job's store
  // (docs/RECOVERY.md); then, when `restart` (replace mode), starts its replacement with
  // TORCHELASTIC_RESTART_COUNT `attempt`. Publishing first means the replacement finds the new
  // generation already open, so the failure is not reported twice.
  void PublishFailure(const WorkerExit& exit, bool restart, int attempt);
  // The failure summary (the first failure in time, then the others) for host `host`; keeps a
  // temporary log directory whose error files it names. Empty without failures.
  std::string TakeSummary(const std::string& host);
  // Ends the TensorFlow exchange (the agent is ending).
  void StopExchange() { tf_.Stop(); }
  // Reaps every group and removes a temporary log directory. Once, before the loop goes.
  void Shutdown();

 private:
  struct Failure {
    WorkerExit exit;
    std::string error_file;
    std::optional<WorkerError> error;  // From TORCHELASTIC_ERROR_FILE, when it wrote one.
    std::optional<HangReport> hang;    // When it was killed as hung.
  };

  NodeState state() const { return lifecycle_->state(); }
  // SetUpLogs without the progress file.
  absl::Status SetUpLogDir();
  void Finish(int exit_status, const std::string& message);
  void OnWorkerExit(const WorkerExit& exit);
  // The spec of local rank `local_rank` for attempt `attempt` (creates its log directory).
  absl::StatusOr<WorkerSpec> MakeSpec(int local_rank, int attempt);
  // A group for this node's workers, watched by the watchdog.
  std::unique_ptr<WorkerGroup> NewGroup();
  // Releases the reserved TensorFlow ports, then starts `group`'s workers.
  void SpawnRound(WorkerGroup* group, int restart_count);
  // StartRound's `replacing`: publishes local ranks [local_rank, nproc) one after the other,
  // then SpawnRound (unless the round was replaced or stopped meanwhile).
  void PublishThenSpawn(WorkerGroup* group, int local_rank, int restart_count, absl::Time start);
  // Several nodes with --distribution tensorflow: exchanges the addresses, then SpawnRound.
  void StartTfExchange(WorkerGroup* group, int restart_count, int64_t round);
  // Starts local ranks [first, nproc) of `group`, kSpawnBatch at a time; posts the rest to the
  // loop. Stops when the round was replaced or is no longer running.
  void SpawnFrom(WorkerGroup* group, int first, int restart_count);
  void SpawnDone(int restart_count);
  // Returns when the replacement was started (InfinitePast when it could not be).
  absl::Time RestartRank(const WorkerExit& exit, int attempt);
  void EnsurePublisher();
  // Publishes `dgt/restart/<rank>` = generation in the job's store.
  void PublishRestart(int rank, int generation);
  Failure MakeFailure(const WorkerExit& exit) const;
  std::string Summary(const std::string& host) const;
  void KeepTempLogRootForSummary(std::string* summary);

  boost::asio::io_context& io_;
  const LaunchOptions& options_;
  const AgentEnv& env_;
  const NodeAssignment& assignment_;
  Sink sink_;
  NodeLifecycle* lifecycle_ = nullptr;
  GroupWatchdog watchdog_;
  // --hang-timeout, --first-progress-timeout: the progress channel and the hung workers' kills.
  HangMonitor hang_;
  std::unique_ptr<WorkerGroup> group_;
  // Policy rank: publishes rank failures into the job's store (created at the first failure).
  std::unique_ptr<FailurePublisher> publisher_;
  std::vector<std::unique_ptr<WorkerGroup>> retired_;  // Replaced groups, kept until exit.
  // PrepareSpare ran: group_ has started no worker yet; the next StartRound takes it.
  bool spare_prepared_ = false;
  // The group whose round is being spawned from its standbys or fork server (a prepared spare's).
  WorkerGroup* warm_group_ = nullptr;
  // This launch's log directory (absolute): <log_dir>/<run_id>_<unique>, or a temporary one.
  std::string log_root_;
  bool log_root_is_temp_ = false;  // Removed at exit (it holds no -r/-t logs).
  // --duplicate-std{out,err}-filters: the filtered log of each (attempt, is_stderr).
  std::map<std::pair<int, bool>, std::shared_ptr<FilteredLog>> filtered_logs_;
  // --distribution tensorflow: this node's ports and the current round's TF_CONFIG addresses.
  TfExchange tf_;
  std::vector<Failure> failures_;  // Failures of the last attempt, in time order.
  // Failures of this round restarted in place (--restart-policy rank), for the summary.
  std::vector<Failure> recovered_failures_;
  // NCCL_IB_HCA / NCCL_SOCKET_IFNAME / NCCL_IB_DISABLE for the current MASTER_ADDR (only
  // variables the user did not set); added to every worker's environment.
  std::map<std::string, std::string> network_env_;
  std::string network_env_master_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_NODE_WORKERS_H_
