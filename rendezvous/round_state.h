// The rendezvous round state machine: which nodes belong to which run, when a round closes, what
// each node is assigned, how membership changes and failures start new rounds, and how a run
// ends. Pure: no I/O, no threads, no clock of its own — the caller passes `now` and sends the
// returned messages. It speaks the domain types of types.h (no protos: the gRPC service, a thin
// layer on top, converts at its edge with proto_convert.h). It keeps every run in a
// RunStateBackend (run_state_backend.h; in memory unless RoundStateOptions::backend names
// another). Each event stages the runs it reads for a change and commits them when it is
// handled, one commit per run per event (or per batch of events: BeginBatch). docs/RENDEZVOUS.md
// describes the semantics; the short form:
//
// - The first round closes as soon as MAX nodes joined, or at MIN once the last-call timeout has
//   passed since MIN was reached.
// - A node arriving while a round runs waits; if there is room (fewer than MAX members) and more
//   nodes wait than spare_nodes, it causes a scale-up round after the last-call timeout (or at
//   once at MAX). Not a restart.
// - A lost member (session ended) starts a new round with the survivors at once if at least MIN
//   remain (not a restart); otherwise the survivors stop their workers and the run waits up to
//   the join timeout for nodes, then fails.
// - A failure report starts a new round with restart_count + 1 while restarts remain, else it
//   ends the run as failed. When every member reports success the run ends as succeeded.
// - Hot spares: nodes waiting while a round runs. Up to spare_nodes of them (the run's first
//   join sets it; --spare-nodes) never cause a scale-up; with MIN == MAX every waiting node is one.
// - Node ranks: the first round sorts nodes by node id. Later rounds keep each surviving node's
//   rank; a lost member's place goes to a waiting node first (node-id order), which takes its
//   node rank and global ranks, so WORLD_SIZE and the layout stay; a place no spare fills is
//   taken by the node with the highest rank. Growth follows in node-id order.
//   MASTER_ADDR:MASTER_PORT is node rank 0's address and a store port it has never served a
//   round from, so every round starts on an empty store (a spare taking node rank 0 hosts it).
// - In-place rounds (JoinRequest.in_place_spares, --restart-policy rank in replace mode): when a
//   lost member's place goes to spares and nothing else changes (node rank 0 survives, every
//   survivor keeps its rank, the world size stays, no restart is held), the round keeps
//   MASTER_ADDR:MASTER_PORT and the restart count, and every Assignment says in_place: the
//   survivors keep their workers, the spares start their ranks' replacements on the same store.
// - A rejoin (JoinRequest.rejoin: the agent's current assignment, sent after its session broke)
//   re-attaches the node to its round when the service still has it. A service that does not
//   know the run (it was restarted) re-creates it in kRunning from the rejoins. It decides
//   nothing (no outcome, restart or scale-up) until every node of the round rejoined or the
//   rejoin window passed. A member's rejoin wins over a fresh agent with its node id. A rejoin that
//   does not fit the run (it moved on) is refused with ABORTED, unless the run waits for nodes
//   (gathering after losing members): the node then joins as a new node. One for a closed run
//   gets its RunFinished.
// - A finished run is closed. Nodes waiting beyond MAX are told they were not admitted
//   (FAILED_PRECONDITION), never the run's outcome. Joins are refused (FAILED_PRECONDITION) while
//   any agent of the run is still connected; once all have left, a join with the run id starts a
//   new run (the closed one is kept an hour for dgt status, or until then).
// - A node id whose agent is connected is refused to a second agent (ALREADY_EXISTS): two agents
//   with one node id would run the same ranks.
//
// Thread-compatible: the service serialises calls under its mutex.
#ifndef DGT_RENDEZVOUS_ROUND_STATE_H_
#define DGT_RENDEZVOUS_ROUND_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rendezvous/run_state_backend.h"
#include "rendezvous/types.h"

namespace dgt::rendezvous {

struct RoundStateOptions {
  // Set in every Assignment (Assignment.host_node_id): the node id of the agent hosting this
  // service in-process, empty for dgt-rendezvous.
  std::string host_node_id;
  // Used when a run's first JoinRequest leaves last_call_timeout at zero (torchrun: 30 s).
  absl::Duration default_last_call_timeout = absl::Seconds(30);
  // Used when a run's first JoinRequest leaves join_timeout at zero (torchrun: 600 s).
  absl::Duration default_join_timeout = absl::Seconds(600);
  // After a restart of the service, how long a run re-created from its nodes' rejoins waits for
  // the rest of its nodes; those still missing then are lost (as a node whose session ended).
  absl::Duration rejoin_timeout = absl::Seconds(60);
  // How long a finished run is remembered to refuse late joins.
  absl::Duration closed_run_retention = absl::Hours(1);
  // After the first failure report of a round that cannot restart, how long to wait for the
  // other members' reports before ending the run: the root cause is the earliest failure in
  // time, and a peer's failure is often a consequence reported first.
  absl::Duration failure_grace = absl::Seconds(1);
  // Field limits: a longer run id, node id or address is refused (INVALID_ARGUMENT).
  size_t max_id_bytes = 256;
  int32_t max_nodes_per_run = 100000;
  // Nodes a run holds beyond its MAX (spares waiting for a place). One more join is refused
  // (RESOURCE_EXHAUSTED), so a client flooding a run with joins cannot grow it without bound.
  int32_t max_waiting_nodes_per_run = 1000;
  // Where runs are kept (not owned; must outlive the machine). Null: an InMemoryRunStateBackend
  // the machine owns.
  RunStateBackend* backend = nullptr;
};

class RoundStateMachine {
 public:
  explicit RoundStateMachine(RoundStateOptions options = {});

  // Each On* returns the messages to send, in order. A refused request is a Refusal (its
  // absl::Status says why, with the codes the header comment names) to the session that sent it,
  // with `close` set.
  std::vector<Outgoing> OnJoin(SessionId session, const JoinRequest& join, absl::Time now);
  std::vector<Outgoing> OnReport(SessionId session, const NodeReport& report, absl::Time now);
  std::vector<Outgoing> OnStoreReady(SessionId session, const StoreReady& ready, absl::Time now);
  // The session's stream ended (agent exited, crashed, or its keepalive failed).
  std::vector<Outgoing> OnSessionClosed(SessionId session, absl::Time now);
  // Handles expired deadlines (last call, scale-up, join timeout) and forgets old closed runs.
  std::vector<Outgoing> OnTick(absl::Time now);

  // The earliest time OnTick has something to do, if any.
  std::optional<absl::Time> NextDeadline() const;

  // Why the last event's commit failed (RunStateBackend::Commit or Delete: etcd unreachable,
  // ABORTED by another writer, or FAILED_PRECONDITION "fenced" once this replica is no longer
  // the leader), or OK. When an event's commit fails, its On* returns no message at all (nothing
  // computed from an event that was not written may reach an agent), the stages left are
  // discarded, and every later On* returns nothing until AdoptRuns: the service steps down
  // (docs/ETCD.md, "Replicas").
  const absl::Status& commit_failure() const { return commit_failure_; }

  // Group commit (docs/ETCD.md, "Replicas"): between BeginBatch and EndBatch the On* calls stage
  // their runs but commit nothing, so that each run one or more of the batch's events touched is
  // written once, by EndBatch. Their messages must not be sent before EndBatch returns OK: when
  // it fails (commit_failure() says why, counted once in failed_commits), nothing of the batch
  // may reach an agent and the service steps down, as for a failed commit of one event. Outside
  // a batch every On* commits at its end. A batch is not nested.
  void BeginBatch();
  // Commits every run the batch touched, stopping at the first failure (the rest discarded).
  // Returns commit_failure(): OK, or why the batch (or an event of it) failed.
  absl::Status EndBatch();
  bool in_batch() const { return in_batch_; }

  // Forgets every session (this replica stopped serving: its agent streams are ended). Writes
  // nothing.
  void ForgetSessions();

  // Takes over every run as a replica that just became the leader:
  // - re-reads the runs (RunStateBackend::Reload);
  // - forgets every session (they were another replica's, or this one's in an earlier term);
  // - clears commit_failure();
  // - writes each run back with no node holding a session. A running run goes into recovery: its
  //   members must rejoin with their assignment within rejoin_timeout from `now`, as after a
  //   restart of the service, and its waiting nodes stay and re-attach with a plain join. A
  //   gathering run keeps its nodes (they re-attach with a plain join with the same node id). A
  //   closed run keeps its outcome for late rejoins.
  // Errors: the reload's or a commit's; the runs not yet written stay as they were.
  absl::Status AdoptRuns(absl::Time now);

  using RunState = ::dgt::rendezvous::RunState;
  std::optional<RunState> StateOf(const std::string& run_id) const;

  // Operators' view of every run (or of `run_id` only, when not empty), in run-id order, at
  // `now`. A node whose session is open was in contact at `now`: its connection answers the
  // service's keepalive pings, or the stream would have ended (rendezvous/keepalive.h), and no
  // ping reaches this class; a node without one, at its last message or its session's end.
  std::vector<RunStatus> Status(const std::string& run_id, absl::Time now) const;

  size_t run_count() const { return backend_->size(); }

  // Totals since start, for metrics.
  struct Counters {
    uint64_t joins = 0;
    uint64_t refused_joins = 0;
    uint64_t rounds = 0;
    uint64_t restarts = 0;
    uint64_t nodes_lost = 0;
    uint64_t runs_succeeded = 0;
    uint64_t runs_failed = 0;
    uint64_t failed_commits = 0;  // Events whose commit failed (nothing of them was sent).
  };
  const Counters& counters() const { return counters_; }
  // Runs per state, for metrics.
  std::map<std::string, int> RunsByState() const;

 private:
  using Run = RunRecord;
  using Node = NodeRecord;
  struct SessionRef {
    std::string run_id;
    std::string node_id;
  };

  std::vector<Outgoing> JoinImpl(SessionId session, const JoinRequest& join, absl::Time now);
  // A join carrying the agent's current assignment (JoinRequest.rejoin), already validated as a
  // join.
  std::vector<Outgoing> RejoinImpl(SessionId session, const JoinRequest& join, absl::Time now);
  // Why `join` does not fit `run` (--nnodes, --nproc-per-node, --spare-nodes), or empty.
  static std::string Mismatch(const Run& run, const JoinRequest& join);
  Node* NodeOf(SessionId session, Run** run);
  // Removes a node from its run and from the run's counts.
  void EraseNode(Run& run, std::map<std::string, Node>::iterator it);
  // Ends a node's session (the node stays: closed run, or a member that finished its part).
  void DetachSession(Run& run, Node& node);
  int32_t ConnectedCount(const Run& run) const;
  int32_t MemberCount(const Run& run) const;
  // `joined`: the session that just joined (it is told the count), or 0.
  void Evaluate(Run& run, absl::Time now, std::vector<Outgoing>& out, SessionId joined = 0);
  // `member_lost`: the round replaces one that lost a member, so it may be in place.
  void StartRound(Run& run, const std::string& reason, int32_t restart_increment, absl::Time now,
                  std::vector<Outgoing>& out, bool member_lost = false);
  // Whether the new round `ranks` (node -> new node rank, by rank; the nodes still hold the last
  // round's ranks) can be in place: the run asked for it, node rank 0 and every other survivor
  // keep their ranks, spares fill the lost places, and the world size stays.
  // Such a round keeps MASTER_ADDR:MASTER_PORT (the store with the recovery keys), the restart
  // count and the layout, and says Assignment.in_place to every member.
  static bool InPlaceFits(const Run& run, const std::vector<std::pair<Node*, int32_t>>& ranks);
  // Starts the round held for node rank 0's next store (or holds it again). Returns false, and
  // drops it, when fewer than MIN nodes are connected any more; a running round it was to
  // replace (members lost, or a restart) then goes as after a loss below MIN (AfterMemberLost).
  bool TrySendPendingRound(Run& run, absl::Time now, std::vector<Outgoing>& out);
  void LoseNode(Run& run, const std::string& node_id, const std::string& why, absl::Time now,
                std::vector<Outgoing>& out);
  // A member of the running round is gone (`lost` says which and why): a new round with the
  // others, or StopWorkers and waiting for nodes, or the end of the run.
  void AfterMemberLost(Run& run, const std::string& lost, absl::Time now,
                       std::vector<Outgoing>& out);
  void EndRecovery(Run& run);
  // Ends the run: RunFinished to its members (and, for `too_few_nodes`, a failure for want of MIN
  // nodes after losing nodes, to the waiting nodes too: a join timeout for them all).
  void FinishRun(Run& run, bool succeeded, const std::string& message, const WorkerFailure* failure,
                 absl::Time now, std::vector<Outgoing>& out, bool too_few_nodes = false);
  // JoinProgress to every waiting node, or only to session `only` when it is not 0.
  void SendProgress(const Run& run, std::vector<Outgoing>& out, SessionId only = 0) const;
  // Ends the run with the earliest of its reported failures.
  void FinishWithEarliestFailure(Run& run, absl::Time now, std::vector<Outgoing>& out);
  static Outgoing ErrorFor(SessionId session, absl::StatusCode code, absl::string_view message);
  // The run, staged for a change that the end of the event commits.
  Run* Touch(const std::string& run_id);
  // A new run, staged likewise.
  Run& CreateRun(const std::string& run_id);
  void DeleteRun(const std::string& run_id);
  // Commits every run the event touched (RunStateBackend::Commit), stopping at the first
  // failure (kept in commit_failure_, the rest discarded).
  void CommitTouched();
  // The end of every On*: commits, and returns `out`, or nothing when the commit failed.
  std::vector<Outgoing> Committed(std::vector<Outgoing> out);
  std::vector<Outgoing> ReportImpl(SessionId session, const NodeReport& report, absl::Time now);
  std::vector<Outgoing> StoreReadyImpl(SessionId session, const StoreReady& ready, absl::Time now);
  std::vector<Outgoing> SessionClosedImpl(SessionId session, absl::Time now);
  std::vector<Outgoing> TickImpl(absl::Time now);
  // The earliest time OnTick has something to do for `run`, if any.
  std::optional<absl::Time> NextDeadlineOf(const Run& run) const;

  RoundStateOptions options_;
  Counters counters_;
  std::unique_ptr<RunStateBackend> owned_backend_;
  RunStateBackend* backend_;
  // Runs staged by the event being handled, committed at its end.
  std::vector<std::string> touched_;
  absl::flat_hash_map<SessionId, SessionRef> sessions_;
  absl::Status commit_failure_;
  // Between BeginBatch and EndBatch: Committed() leaves the touched runs staged.
  bool in_batch_ = false;
  // Whether commit_failure_ was set already when the batch began (counted then).
  bool batch_failed_before_ = false;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_ROUND_STATE_H_
