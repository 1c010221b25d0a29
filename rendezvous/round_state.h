// The rendezvous round state machine: which nodes belong to which run, when a round closes, what
// each node is assigned, how membership changes and failures start new rounds, and how a run
// ends. Pure: no I/O, no threads, no clock of its own — the caller passes `now` and sends the
// returned messages. The gRPC service is a thin layer on top. docs/RENDEZVOUS.md describes the
// semantics; the short form:
//
// - The first round closes as soon as MAX nodes joined, or at MIN once the last-call timeout has
//   passed since MIN was reached.
// - A node arriving while a round runs waits; if there is room (fewer than MAX members) it causes
//   a scale-up round after the last-call timeout (or at once at MAX). Not a restart.
// - A lost member (session ended) starts a new round with the survivors at once if at least MIN
//   remain (not a restart); otherwise the survivors stop their workers and the run waits up to
//   the join timeout for nodes, then fails.
// - A failure report starts a new round with restart_count + 1 while restarts remain, else it
//   ends the run as failed. When every member reports success the run ends as succeeded.
// - Node ranks: the first round sorts nodes by node id. Later rounds keep each surviving node's
//   rank, except that the node with the highest rank moves into a gap a lost node left; new nodes
//   follow in node-id order. MASTER_ADDR:MASTER_PORT is node rank 0's address and a store port
//   it has never served a round from, so every round starts on an empty store.
// - A rejoin (JoinRequest.rejoin: the agent's current assignment, sent after its session broke)
//   re-attaches the node to its round when the service still has it; a service that does not
//   know the run (it was restarted) re-creates it in kRunning from the rejoins, and decides
//   nothing (no outcome, restart or scale-up) until every node of the round rejoined or the
//   rejoin window passed. A member's rejoin wins over a fresh agent with its node id. A rejoin that
//   does not fit the run (it moved on) is refused with ABORTED; one for a closed run gets its
//   RunFinished.
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
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "dgt/rendezvous/v1/rendezvous.pb.h"

namespace dgt::rendezvous {

using SessionId = uint64_t;

// One message for one session; `close` ends that session after the message.
struct Outgoing {
  SessionId session = 0;
  v1::ServiceMessage message;
  bool close = false;
};

struct RoundStateOptions {
  // Set in every Assignment (Assignment.host_node_id): the node id of the agent hosting this
  // service in-process, empty for dgt-rendezvous.
  std::string host_node_id;
  // Used when a run's first JoinRequest leaves last_call_timeout_s at 0 (torchrun: 30 s).
  absl::Duration default_last_call_timeout = absl::Seconds(30);
  // Used when a run's first JoinRequest leaves join_timeout_s at 0 (torchrun: 600 s).
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
};

class RoundStateMachine {
 public:
  explicit RoundStateMachine(RoundStateOptions options = {});

  std::vector<Outgoing> OnJoin(SessionId session, const v1::JoinRequest& join, absl::Time now);
  std::vector<Outgoing> OnReport(SessionId session, const v1::NodeReport& report, absl::Time now);
  std::vector<Outgoing> OnStoreReady(SessionId session, const v1::StoreReady& ready,
                                     absl::Time now);
  // The session's stream ended (agent exited, crashed, or its keepalive failed).
  std::vector<Outgoing> OnSessionClosed(SessionId session, absl::Time now);
  // Handles expired deadlines (last call, scale-up, join timeout) and forgets old closed runs.
  std::vector<Outgoing> OnTick(absl::Time now);

  // The earliest time OnTick has something to do, if any.
  std::optional<absl::Time> NextDeadline() const;

  enum class RunState { kGathering, kRunning, kClosed };
  std::optional<RunState> StateOf(const std::string& run_id) const;

  // Operators' view of every run (or one run).
  v1::GetStatusResponse Status(const std::string& run_id) const;

  size_t run_count() const { return runs_.size(); }

  // Totals since start, for metrics.
  struct Counters {
    uint64_t joins = 0;
    uint64_t refused_joins = 0;
    uint64_t rounds = 0;
    uint64_t restarts = 0;
    uint64_t nodes_lost = 0;
    uint64_t runs_succeeded = 0;
    uint64_t runs_failed = 0;
  };
  const Counters& counters() const { return counters_; }
  // Runs per state, for metrics.
  std::map<std::string, int> RunsByState() const;

 private:
  struct Node {
    std::string node_id;
    SessionId session = 0;
    std::string address;
    int32_t nproc = 0;
    int32_t store_port = 0;  // A store never used for a round; 0 while the agent opens one.
    int32_t node_rank = -1;  // In the current round; -1 while waiting.
    bool succeeded = false;  // Reported success for the current round.
    bool failed = false;     // Reported a failure for the current round (counted once).
    absl::Time last_contact;
  };
  struct Run {
    std::string run_id;
    int32_t min_nodes = 0;
    int32_t max_nodes = 0;
    int32_t nproc_per_node = 0;
    int32_t max_restarts = 0;
    absl::Duration last_call_timeout;
    absl::Duration join_timeout;
    RunState state = RunState::kGathering;
    std::map<std::string, Node> nodes;  // By node id: members and waiting nodes.
    // Kept in step with `nodes` so that a join or report costs O(log n), not O(n): a round of
    // N nodes must not cost N^2.
    int32_t connected = 0;  // Nodes with a session.
    int32_t members = 0;    // Nodes with a rank (node_rank >= 0).
    int32_t succeeded = 0;  // Members that reported success for the current round.
    int64_t round = -1;
    int32_t restart_count = 0;
    int32_t world_size = 0;
    std::string master_addr;
    int32_t master_port = 0;
    // kGathering: close at MIN once this passes.
    std::optional<absl::Time> last_call_deadline;
    // kGathering after a loss below MIN: fail the run once this passes.
    std::optional<absl::Time> join_deadline;
    // kRunning with waiting nodes and room: scale up once this passes.
    std::optional<absl::Time> scale_up_deadline;
    // Failures reported in the current round (no restart left), and when to end the run.
    std::vector<v1::WorkerFailure> failures;
    std::vector<std::string> failure_messages;
    std::optional<absl::Time> failure_deadline;
    // Re-created from rejoins after the service restarted: `expected_members` nodes ran the
    // round; until all of them rejoined (or rejoin_deadline passes) the run neither ends with
    // success nor scales up.
    bool recovering = false;
    int32_t expected_members = 0;
    std::vector<bool> rank_rejoined;  // By node rank, while recovering.
    std::optional<absl::Time> rejoin_deadline;
    // A failure reported while recovering, with restarts left: the restart round waits for the
    // recovery to end (all rejoined, or the window passed), so that it includes every node that
    // rejoins rather than only those that came back first. The report's text.
    std::optional<std::string> deferred_restart;
    // A round decided but held until node rank 0 has a fresh store port.
    std::optional<std::string> pending_reason;
    int32_t pending_restart_increment = 0;
    std::string outcome;
    // What every member was told when the run ended (kClosed).
    v1::RunFinished finished;
    absl::Time closed_at;
  };
  struct SessionRef {
    std::string run_id;
    std::string node_id;
  };

  std::vector<Outgoing> JoinImpl(SessionId session, const v1::JoinRequest& join, absl::Time now);
  // A join carrying the agent's current assignment (JoinRequest.rejoin), already validated as a
  // join.
  std::vector<Outgoing> RejoinImpl(SessionId session, const v1::JoinRequest& join, absl::Time now);
  // Why `join` does not fit `run` (--nnodes, --nproc-per-node), or empty.
  static std::string Mismatch(const Run& run, const v1::JoinRequest& join);
  Node* NodeOf(SessionId session, Run** run);
  // Removes a node from its run and from the run's counts.
  void EraseNode(Run& run, std::map<std::string, Node>::iterator it);
  // Ends a node's session (the node stays: closed run, or a member that finished its part).
  void DetachSession(Run& run, Node& node);
  int32_t ConnectedCount(const Run& run) const;
  int32_t MemberCount(const Run& run) const;
  // `joined`: the session that just joined (it is told the count), or 0.
  void Evaluate(Run& run, absl::Time now, std::vector<Outgoing>& out, SessionId joined = 0);
  void StartRound(Run& run, const std::string& reason, int32_t restart_increment, absl::Time now,
                  std::vector<Outgoing>& out);
  void TrySendPendingRound(Run& run, std::vector<Outgoing>& out);
  void LoseNode(Run& run, const std::string& node_id, const std::string& why, absl::Time now,
                std::vector<Outgoing>& out);
  // A member of the running round is gone (`lost` says which and why): a new round with the
  // others, or StopWorkers and waiting for nodes, or the end of the run.
  void AfterMemberLost(Run& run, const std::string& lost, absl::Time now,
                       std::vector<Outgoing>& out);
  void EndRecovery(Run& run);
  void FinishRun(Run& run, bool succeeded, const std::string& message,
                 const v1::WorkerFailure* failure, absl::Time now, std::vector<Outgoing>& out);
  // JoinProgress to every waiting node, or only to session `only` when it is not 0.
  void SendProgress(const Run& run, std::vector<Outgoing>& out, SessionId only = 0) const;
  // Ends the run with the earliest of its reported failures.
  void FinishWithEarliestFailure(Run& run, absl::Time now, std::vector<Outgoing>& out);
  static Outgoing ErrorFor(SessionId session, int code, std::string message);

  RoundStateOptions options_;
  Counters counters_;
  std::map<std::string, Run> runs_;
  absl::flat_hash_map<SessionId, SessionRef> sessions_;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_ROUND_STATE_H_
