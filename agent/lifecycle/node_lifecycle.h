// NodeLifecycle: the decisions of one node of a job, from its join to its exit status, as a pure
// state machine in the shape of rendezvous/round_state.h. Events come in (a round assignment, a
// stop from the service, the run's outcome, the service lost or back, a worker's exit, a signal,
// the workers' output drained, tick(now)); the actions the agent must carry out come out (start
// or stop the workers, publish a failure, report, finish with an exit status, log a line).
// NextDeadline() says when the caller must tick. No I/O, no threads, no clock of its own: the
// Agent (agent/agent.h) is the thin runtime that carries the actions out on its io_context, and
// tests/agent/node_lifecycle_test.cc drives it on a simulated clock.
//
// The restart decision itself is RestartTracker's (agent/lifecycle/restart_policy.h, its table);
// the lifecycle asks it and carries the answer into actions.
//
// States (NodeState):
//   kJoining          waiting for the first round (or, static backend, for every node).
//   kRunning          this round's workers run.
//   kRestarting       a local group restart: the workers stop, then start with restart + 1.
//   kStopping         the workers stop (a failure, a signal, the run failed elsewhere).
//   kRerounding       a new round was assigned (or the service stopped the workers); they stop
//                     and the round starts when they are gone.
//   kWaitingForRound  the service stopped this node's workers; a new assignment is awaited.
//   kAwaitingOutcome  the workers are gone; the run's outcome is awaited.
//   kDone             finished: the exit status is decided.
//
// Thread-compatible: the agent calls it from its event loop only.
#ifndef DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_H_
#define DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "agent/flags/launch_options.h"
#include "agent/lifecycle/restart_policy.h"
#include "agent/workers/worker_exit.h"
#include "common/signal_name.h"

namespace dgt::agent {

enum class NodeState {
  kJoining,
  kRunning,
  kRestarting,
  kStopping,
  kRerounding,
  kWaitingForRound,
  kAwaitingOutcome,
  kDone
};

// A round of the run as the coordinator assigns it to this node (the rendezvous service's
// Assignment, or the static backend's one round). The runtime keeps the wire form.
struct RoundAssignment {
  int64_t round = 0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of the round's workers.
  int node_rank = 0;
  int node_count = 1;
  std::string reason;  // Why the round started ("initial", "node lost", ...), for logs.
  // An in-place round (Assignment.in_place): a spare took a lost node's place and nothing else
  // changed. A running node with the same node rank, node count and restart count keeps its
  // workers; any other node starts its ranks as replacements (their failures published first).
  bool in_place = false;
};

// How the rendezvous session ended (NodeLifecycle::OnSessionClosed).
struct SessionEnd {
  bool refused = false;  // The service refused the session (a bad token, a limit, ...).
  std::string error;     // Its status message.
  // The service was hosted in-process by another node's agent (c10d-style), whose loss it
  // means: why, for the exit message. Unset for a dgt-rendezvous service (reconnect).
  std::optional<std::string> host_lost;
  bool lingering = false;  // Node rank 0 already keeps the round's store before finishing.
};

// A failed node's done mark (every node done), read from the round's store.
struct MarkedFailure {
  int node_rank = 0;
  int exit_status = 0;
};

// The round's done marks as the lifecycle weighs them (the runtime reads them from the round's
// store: agent/coord/done_marks.h, DoneMarks).
struct MarksView {
  bool all_done = false;          // Every node's workers are done.
  bool all_succeeded = false;     // ... and every status is 0.
  bool seen_by_others = false;    // Every node but this one has learned the outcome from them.
  int first_worker_failure = -1;  // DoneMarks::FirstWorkerFailure: a node rank, or -1.
  int first_worker_failure_status = 0;  // That node's exit status.
};

// The run's outcome as the coordinator tells it (RunFinished).
struct RunOutcome {
  bool succeeded = false;
  std::string message;
  bool has_failure = false;  // The fields below name the root cause.
  std::string failed_node_id;
  int exit_code = 0;
  int signal = 0;
  // Failed for want of MIN nodes after losing nodes, for the join timeout: kExitJoinTimeout.
  bool too_few_nodes = false;
  // The root cause is an outside signal that stopped another node's agent (a scheduler's cancel
  // reaching the nodes one by one), not a failure: an outside signal to this node before it
  // finishes still decides its status (128 + N).
  bool stopped_by_signal = false;
};

// The actions NodeLifecycle returns, one struct per kind: what the runtime must carry out.
namespace actions {

enum class Level { kDebug, kInfo, kWarn, kError };

// One line of the agent's log.
struct Log {
  Level level = Level::kInfo;
  std::string text;
};
// Start every local worker (a new attempt) with TORCHELASTIC_RESTART_COUNT `restart_count`.
// `replacing`: an in-place round this node's workers join as the replacements of its ranks
// (a spare taking a lost node's place): publish each rank's failure into the round's store
// first, as for a rank restarted in place.
struct StartRound {
  int restart_count = 0;
  bool replacing = false;
};
// Take the held round as this node's (OnRoundApplied then answers with StartRound).
// `assignment`: the service's round; nullopt for the static backend's one round.
// `keep_workers`: an in-place round this node's running workers go on in: take its number only
// (no store change, no OnRoundApplied).
struct ApplyAssignment {
  std::optional<RoundAssignment> assignment;
  bool keep_workers = false;
};
// Stop the workers with `signal` (0: SIGTERM), SIGKILL after the stop timeout.
struct StopWorkers {
  int signal = 0;
};
// SIGKILL whatever is left of the workers' process groups.
struct KillWorkers {};
// Forward `signal` to the workers, which go on.
struct ForwardSignal {
  int signal = 0;
};
// A failure for the summary; `recovered`: its rank was restarted in place. `root_cause`: it
// takes the first place from the failures recorded before it (a rank declared hung before the
// one reaped first).
struct RecordFailure {
  WorkerExit exit;
  bool recovered = false;
  bool root_cause = false;
};
// The failures recorded so far belong to no outcome (a new round, or another node's failure was
// the root cause).
struct ClearFailures {};
// Publish the in-place recovery keys for `exit`; with `restart`, OnFailurePublished follows and
// the replacement starts with TORCHELASTIC_RESTART_COUNT `restart_count`.
struct PublishFailure {
  WorkerExit exit;
  bool restart = false;
  int restart_count = 0;
};
// The coordinator stops waiting for other nodes (a signal).
struct InterruptCoordinator {};
// Close the session with the rendezvous service now, without a report: the service counts this
// node as lost at once (a new round for the others, or a spare) while its workers stop. No
// reconnect follows. Nothing for the static backend.
struct LeaveSession {};
// Call OnDrained once the workers' output is drained.
struct WatchDrain {};
// This node's workers are done: report to the coordinator. `failure`: the first failed worker;
// `signal`: the outside signal that stopped them (0: none); `unhealthy`: a failed health check
// made this node leave (static backend: the others fail naming it, with kExitLauncherError).
struct Report {
  int exit_status = 0;
  std::string text;
  std::optional<WorkerExit> failure;
  int signal = 0;
  bool unhealthy = false;
};
// This node's done mark in the round's store.
struct MarkDone {
  int exit_status = 0;
};
// Read the round's done marks now (OnMarks answers).
struct PollMarks {};
// Read them again in 250 ms (OnMarks answers).
struct PollMarksLater {};
// The outcome learned from the done marks: node rank 0 keeps the round's store until every other
// node has seen it (OnLingerStarted), the others write their seen mark and finish.
struct FinishFromMarks {
  int exit_status = 0;
  std::string text;
};
// Finish, except that the node serving the round's store may first keep it up (done marks).
struct Linger {
  int exit_status = 0;
  std::string text;
};
// The service is lost: reconnect within the read timeout (the workers keep running);
// OnReconnectWindowOver if it stays away.
struct Reconnect {};
// The end of this agent, with its exit status.
struct Finish {
  int exit_status = 0;
  std::string text;
};

}  // namespace actions

using LifecycleAction =
    std::variant<actions::Log, actions::StartRound, actions::ApplyAssignment, actions::StopWorkers,
                 actions::KillWorkers, actions::ForwardSignal, actions::RecordFailure,
                 actions::ClearFailures, actions::PublishFailure, actions::InterruptCoordinator,
                 actions::LeaveSession, actions::WatchDrain, actions::Report, actions::MarkDone,
                 actions::PollMarks, actions::PollMarksLater, actions::FinishFromMarks,
                 actions::Linger, actions::Reconnect, actions::Finish>;

// "StopWorkers(SIGTERM)", "Finish(1, message)", "Log(warn): text", ...: what tests compare.
std::string DebugString(const LifecycleAction& action);

using LifecycleActions = std::vector<LifecycleAction>;

// "SIGTERM" for 15; "signal N" for a number without a name (common/signal_name.h).
using ::dgt::SignalName;

class NodeLifecycle {
 public:
  struct Options {
    // For messages: the run, this node, the service's endpoint, this node's address.
    std::string run_id;
    std::string node_id;
    std::string rdzv_endpoint;
    std::string advertised_address;
    int min_nodes = 1;
    int nproc_per_node = 1;
    double join_timeout_s = 600;  // First round, and a new round after a stop.
    std::string join_timeout_flag = "--join-timeout";
    double reconnect_timeout_s = 60;  // For messages; the runtime times the reconnect window.
    // How long a node awaiting the outcome, having lost the service, tries to rejoin it (another
    // replica, or the restarted service) and send its report again before it trusts done marks
    // that say every node succeeded (at most reconnect_timeout_s). Another node may have rejoined
    // already: the service, which had not counted every report, would fail the run for want of
    // this node.
    absl::Duration rejoin_before_marks = absl::Seconds(10);
    double stop_timeout_s = 30;  // For messages; the runtime times the SIGKILL.
    absl::Duration drain_timeout = absl::Seconds(2);  // Bound on the wait for worker output.
    // RestartTracker's inputs (its table).
    RestartPolicy restart_policy = RestartPolicy::kGroup;
    int max_restarts = 0;
    bool shrink = false;
    RestartBackend backend = RestartBackend::kRendezvous;
  };

  // `clock` (not owned) times RestartTracker's history only; every decision takes `now`.
  NodeLifecycle(Options options, const Clock* clock);

  NodeState state() const { return state_; }
  int stop_signal() const { return stop_signal_; }
  const std::optional<WorkerExit>& first_failure() const { return first_failure_; }
  bool has_remote_outcome() const { return remote_outcome_.has_value(); }
  // A remote outcome that an outside signal to this node does not override: any but another
  // node's own stop by a signal.
  bool RemoteFailureCameFirst() const {
    return remote_outcome_.has_value() && !remote_outcome_->stopped_by_signal;
  }
  int64_t round() const { return round_; }
  int node_rank() const { return node_rank_; }
  int restart_count() const { return restart_count_; }
  // Whether a failure may still be followed by a group restart (decided by the service).
  bool GroupRestartLeft() const;
  // A held round (kRerounding) that starts when the workers are gone.
  const std::optional<RoundAssignment>& pending_assignment() const { return pending_; }
  // Restarts consumed in the current round (RestartTracker).
  int restarts_used() const { return tracker_ ? tracker_->restarts() : 0; }

  // --- Joining -------------------------------------------------------------------------------
  // The join was sent at `now`: the round must come within join_timeout_s (Finish 75).
  void OnJoinSent(absl::Time now);
  // JoinProgress: how many nodes joined so far (for the join timeout's message), and whether this
  // node waits as a hot spare beside a running round. A spare waits as long as the run runs: the
  // service ends the wait with the run (RunFinished, or a refusal), and a lost service is the
  // session's own deadline. So the join deadline is lifted while the node is a spare, and set
  // again from `now` by progress that is not a spare's while the node still joins.
  void OnProgress(int joined_nodes, bool spare, absl::Time now);
  // The coordinator assigned `a` (`a.round` may repeat the current round only for a rejoin,
  // which the runtime answers itself).
  // `alive`: workers of the current round still running. An in-place round (`a.in_place`) that
  // matches this running node (kRunning, same node rank, node count and restart count) keeps its
  // workers: ApplyAssignment with keep_workers, and round() is `a.round` at once.
  LifecycleActions OnAssignment(const RoundAssignment& a, int alive, absl::Time now);
  // The runtime applied an assignment (ApplyAssignment, or its own first round): a fresh
  // restart budget, then StartRound (in an in-place round: TORCHELASTIC_RESTART_COUNT
  // `a.restart_count` + 1, replacing).
  LifecycleActions OnRoundApplied(const RoundAssignment& a);
  // The coordinator refused this node (an Error, or a refused session while joining).
  // `rejoin`: the refusal answered a rejoin after the service was lost.
  LifecycleActions OnRefused(const std::string& message, bool rejoin, int alive);
  // The service stopped this node's workers (too few nodes): wait for a new round.
  LifecycleActions OnStop(const std::string& reason, int alive, absl::Time now);
  // The run ended (RunFinished).
  LifecycleActions OnRunFinished(const RunOutcome& outcome);
  // The static backend's start answer: ok (every node there), AlreadyExists (77), other (69).
  LifecycleActions OnStaticStarted(bool ok, bool already_exists, const std::string& message);
  // The static backend's answer to Report: `others_ok` false with its message when the other
  // nodes could not be heard.
  LifecycleActions OnStaticOutcome(bool others_ok, const std::string& message);
  // The static backend learned that another node failed (before or after this node reported);
  // `stopped_by_signal`: that node's agent was stopped by an outside signal (RunOutcome).
  LifecycleActions OnStaticRemoteFailure(int exit_status, const std::string& message,
                                         bool stopped_by_signal = false);

  // --- The service lost ----------------------------------------------------------------------
  // This node must leave the run (service lost for good, a rejoin refused): stop the workers,
  // then finish with `exit_status` (Linger). `alive`: workers still running.
  LifecycleActions LeaveRun(int exit_status, const std::string& message, int alive);
  // The session with the rendezvous service ended (Reconnect, a refusal, or the end of the node
  // that hosted it).
  LifecycleActions OnSessionClosed(const SessionEnd& end, int alive);
  // The service did not come back within the read timeout. `marked`: the first failed node of
  // the done marks when every node is done.
  LifecycleActions OnReconnectWindowOver(bool lingering, std::optional<MarkedFailure> marked,
                                         int alive);
  // Without the service, another node's failed done mark: stop this node's workers.
  LifecycleActions OnMarksFailure(int node_rank, int exit_status);
  // The runtime keeps the round's store (node rank 0, the service lost) before finishing with
  // `exit_status` and `message`: until every node's done mark is there (and, with
  // `wait_for_seen`, every other node has seen the outcome), at most until `deadline`. OnMarks
  // decides when.
  void OnLingerStarted(int exit_status, std::string message, bool wait_for_seen,
                       absl::Time deadline);
  bool lingering() const { return linger_.has_value(); }
  // The round's done marks were read (PollMarks, PollMarksLater): `marks`, the last ones read
  // (nullopt while none could be); `service_lost`: the rendezvous service is unreachable, for
  // `lost_for` so far.
  // Lingering: finish once they are all there (or at the deadline). Awaiting the outcome without
  // the service: FinishFromMarks when every node succeeded (once the service has been away for
  // rejoin_before_marks, or reconnect_timeout_s if less), or when every node is done, one's
  // workers failed and no group restart is left (the service would end the run as failed).
  // Running without the service and no group restart left: another node's failed mark stops
  // this node's workers (OnMarksFailure). Else PollMarksLater while the marks may still decide,
  // nothing once they cannot.
  LifecycleActions OnMarks(const std::optional<MarksView>& marks, bool service_lost, absl::Time now,
                           absl::Duration lost_for = absl::InfiniteDuration());

  // --- Workers -------------------------------------------------------------------------------
  // A worker exited at `now`; `alive` workers are left.
  LifecycleActions OnWorkerExit(const WorkerExit& exit, int alive, absl::Time now);
  // PublishFailure with restart is done (`group_current`: the round did not change meanwhile).
  // Returns whether to start the replacement now (kRestartRank's work; the runtime then calls
  // OnWorkersIdle).
  bool OnFailurePublished(bool group_current);
  // After a replacement's start: when no worker is alive nor pending, the round is over.
  LifecycleActions OnWorkersIdle(int alive, absl::Time now);
  // kRestartRank could not start the replacement.
  LifecycleActions OnRankRestartFailed(const WorkerExit& exit);
  // The round's workers are all started (or its start stopped early); `alive` remain.
  LifecycleActions OnSpawnDone(int alive, absl::Time now);
  // The workers' output is drained (WatchDrain).
  LifecycleActions OnDrained();
  // A signal from outside; `workers_started`: a round's workers exist.
  LifecycleActions OnSignal(int sig, bool workers_started);
  // A health check failed (agent/health/health_monitor.h); `message` names it and its reason.
  // This node leaves the run as on a SIGTERM from outside (its workers stopped, no report, the
  // session closed at its end, so that the service's elastic rule or a spare takes over) and
  // exits kExitNodeUnhealthy with `message`, unless a signal or a failure came first (the first
  // cause decides the status). Before the workers started: Finish at once. Once this node's
  // workers are done (awaiting the outcome): only logged.
  LifecycleActions OnHealthFailed(const std::string& message, bool workers_started);
  bool unhealthy() const { return unhealthy_.has_value(); }
  // Expired deadlines: the join timeout, the wait for a new round, the drain bound.
  LifecycleActions OnTick(absl::Time now);
  // The earliest time OnTick has something to do, if any.
  std::optional<absl::Time> NextDeadline() const;

  // The runtime finished by itself (a start failure, TF_CONFIG, ...): kDone.
  LifecycleActions Finish(int exit_status, const std::string& message);

  // "rank R (local rank L on node rank N, ADDR, pid P) exited with code C".
  std::string DescribeFailure(const WorkerExit& exit) const;

 private:
  LifecycleActions AllWorkersExited(absl::Time now);
  LifecycleActions StartRound(int restart_count, bool replacing = false);
  LifecycleActions RunFinishedWhileAwaiting(const RunOutcome& outcome);
  // Finish after an outside stop signal: 128+N, or the status of a cause that came before the
  // signal (docs/EXIT_CODES.md: the first cause's).
  LifecycleActions FinishSignalled();
  void Stop(LifecycleActions* out, int signal = 0);
  bool StoppingForSignal(LifecycleActions* out, const std::string& what,
                         const std::string& reason) const;
  // Stopped from outside (a signal, or a failed health check): the status and message to
  // finish with.
  int StoppedStatus() const;
  std::string StoppedText() const;

  Options options_;
  const Clock* clock_;
  NodeState state_ = NodeState::kJoining;
  std::unique_ptr<RestartTracker> tracker_;
  int64_t round_ = -1;
  int node_rank_ = 0;
  int node_count_ = 1;
  int restart_count_ = 0;       // Of the current assignment.
  int next_restart_count_ = 0;  // A local group restart's attempt.
  int joined_nodes_ = 0;
  int stop_signal_ = 0;
  // A failed health check's message: this node leaves (stop_signal_ is SIGTERM then).
  std::optional<std::string> unhealthy_;
  // The stop signal came before any other cause of this node's end (a failed worker, the run's
  // failure elsewhere, the service ending this node's part): StoppedStatus() is the exit status.
  bool signal_decides_ = false;
  int pending_restarts_ = 0;  // Replacements waiting for their failure to be published.
  bool spawning_ = false;
  bool drain_pending_ = false;
  std::optional<RoundAssignment> pending_;
  std::optional<WorkerExit> first_failure_;
  std::optional<RunOutcome> remote_outcome_;
  std::optional<std::pair<int, std::string>> leave_;
  std::optional<int> marks_failure_;
  struct LingerPlan {
    int exit_status = 0;
    std::string message;
    bool wait_for_seen = false;
    absl::Time deadline;
  };
  std::optional<LingerPlan> linger_;
  // Deadlines OnTick acts on.
  std::optional<absl::Time> join_deadline_;
  std::optional<absl::Time> round_wait_deadline_;
  std::optional<absl::Time> drain_deadline_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_H_
