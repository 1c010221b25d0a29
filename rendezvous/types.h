// The rendezvous domain types: what agents and the service say to each other (join, report,
// assignment, outcome, refusal) and what operators see (run and node status), in C++ terms —
// absl::Time and absl::Duration for times, absl::Status for refusals, std::optional for the
// fields the protocol may leave out, enums for states. The operators' view of a run (RunState,
// RunStatus, NodeStatus) is run_status/run_status.h's, below both the rendezvous and the jobs. The
// round state machine (round_state.h) and the run state backend (run_state_backend.h) speak only
// these; the v1 protos (proto/dgt/rendezvous/v1/rendezvous.proto) appear only at the gRPC edges,
// converted in one place (proto_convert.h). Field meanings are those of the proto's comments.
//
// Plain value types: thread-compatible.
#ifndef DGT_RENDEZVOUS_TYPES_H_
#define DGT_RENDEZVOUS_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "run_status/run_status.h"

namespace dgt::rendezvous {

// One agent's Session stream, as the service numbers them (never 0).
using SessionId = uint64_t;

// What one node was told for one round (v1.Assignment).
struct Assignment {
  std::string run_id;
  int64_t round = 0;  // From 0.
  int32_t node_rank = 0;
  int32_t node_count = 0;
  int32_t world_size = 0;         // Workers in the round.
  int32_t first_global_rank = 0;  // Global rank of this node's local rank 0.
  std::string master_addr;
  int32_t master_port = 0;
  int32_t restart_count = 0;  // Restarts after failures (TORCHELASTIC_RESTART_COUNT).
  std::string reason;         // "initial", "scale-up", "node lost: ...", "rejoined", ...
  std::string host_node_id;   // Node whose agent hosts the service; empty for dgt-rendezvous.
  // A spare took a lost node's place and the survivors keep their workers (v1.Assignment).
  bool in_place = false;

  friend bool operator==(const Assignment&, const Assignment&) = default;
};

// Whether `a` is the round `held` describes (the service's answer to a rejoin), not a new round
// that merely has the same number: every field but `reason` and `host_node_id` is equal. The
// agent's IsSameRound (agent/agent.cc) is this check.
bool SameRound(const Assignment& a, const Assignment& held);

// A node's first message on a session (v1.JoinRequest).
struct JoinRequest {
  std::string run_id;
  std::string node_id;
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  int32_t nproc_per_node = 0;
  std::string address;     // Where other nodes reach this node (MASTER_ADDR at node rank 0).
  int32_t store_port = 0;  // The store this agent listens on (MASTER_PORT at node rank 0).
  // Zero keeps the service default (RoundStateOptions); negative is refused.
  absl::Duration last_call_timeout = absl::ZeroDuration();
  int32_t max_restarts = 0;
  absl::Duration join_timeout = absl::ZeroDuration();
  // The agent's current assignment when it rejoins over a new session.
  std::optional<Assignment> rejoin;
  // --spare-nodes: waiting nodes held as spares rather than scaling the run up (>= 0).
  int32_t spare_nodes = 0;
  // The agent keeps its workers when a spare takes a lost node's place (--restart-policy rank,
  // replace mode): such a loss becomes an in-place round.
  bool in_place_spares = false;

  friend bool operator==(const JoinRequest&, const JoinRequest&) = default;
};

// The first failed worker of a node (v1.WorkerFailure).
struct WorkerFailure {
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t exit_code = 0;  // 0 when a signal ended the worker.
  int32_t signal = 0;     // 0 when the worker exited.
  std::string node_id;
  absl::Time time = absl::UnixEpoch();  // When the worker ended; the earliest is the root cause.

  friend bool operator==(const WorkerFailure&, const WorkerFailure&) = default;
};

// A node's outcome for a round (v1.NodeReport).
struct NodeReport {
  int64_t round = 0;
  bool succeeded = false;
  std::optional<WorkerFailure> failure;
  std::string message;

  friend bool operator==(const NodeReport&, const NodeReport&) = default;
};

// The agent's next store listens on `store_port` (v1.StoreReady).
struct StoreReady {
  int32_t store_port = 0;

  friend bool operator==(const StoreReady&, const StoreReady&) = default;
};

using AgentMessage = std::variant<JoinRequest, NodeReport, StoreReady>;

// Nodes joined so far while the round is open (v1.JoinProgress).
struct JoinProgress {
  int32_t joined_nodes = 0;
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  bool spare = false;  // A round runs and this node waits as a hot spare.

  friend bool operator==(const JoinProgress&, const JoinProgress&) = default;
};

// Stop the workers and wait for the next round (v1.StopWorkers).
struct StopWorkers {
  int64_t round = 0;
  std::string reason;

  friend bool operator==(const StopWorkers&, const StopWorkers&) = default;
};

// How the run ended (v1.RunFinished).
struct RunFinished {
  bool succeeded = false;
  std::string message;
  std::optional<WorkerFailure> failure;  // For a failed run whose cause was a worker.
  // Failed below MIN nodes after losing nodes, for the join timeout (v1.RunFinished).
  bool too_few_nodes = false;

  friend bool operator==(const RunFinished&, const RunFinished&) = default;
};

// A refused request (v1.Error): never OK. The canonical codes as STYLE.md assigns them:
// InvalidArgument (bad join), AlreadyExists (a second agent with a node id), ResourceExhausted
// (a run full of waiting nodes), FailedPrecondition (closed run, not admitted, report before
// join), Aborted (a rejoin the run moved past).
struct Refusal {
  absl::Status status;

  friend bool operator==(const Refusal&, const Refusal&) = default;
};

using ServiceMessage = std::variant<JoinProgress, Assignment, RunFinished, Refusal, StopWorkers>;

// One message for one session; `close` ends that session after the message.
struct Outgoing {
  SessionId session = 0;
  ServiceMessage message;
  bool close = false;

  friend bool operator==(const Outgoing&, const Outgoing&) = default;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_TYPES_H_
