// The rendezvous round state machine: which nodes belong to which run, when a round closes, what
// each node is assigned, and how a run ends. Pure: no I/O, no threads, no clock of its own — the
// caller passes `now` and sends the returned messages. The gRPC service is a thin layer on top.
//
// Round semantics (docs/RENDEZVOUS.md): a run's round closes as soon as MAX nodes joined, or at
// MIN nodes once the last-call timeout has passed since MIN was reached. Node ranks follow the
// sorted node ids (deterministic), each node's first global rank is the sum of the nproc of the
// nodes before it, and MASTER_ADDR:MASTER_PORT is node rank 0's address and store port. A run
// ends when every node reported success, or at the first failure or lost node; later joins are
// refused with FAILED_PRECONDITION.
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

namespace v1 = ::dgt::rendezvous::v1;

using SessionId = uint64_t;

// One message for one session; `close` ends that session after the message.
struct Outgoing {
  SessionId session = 0;
  v1::ServiceMessage message;
  bool close = false;
};

struct RoundStateOptions {
  // Used when a run's first JoinRequest leaves last_call_timeout_s at 0 (torchrun: 30 s).
  absl::Duration default_last_call_timeout = absl::Seconds(30);
  // How long a finished run is remembered to refuse late joins.
  absl::Duration closed_run_retention = absl::Hours(1);
};

class RoundStateMachine {
 public:
  explicit RoundStateMachine(RoundStateOptions options = {});

  std::vector<Outgoing> OnJoin(SessionId session, const v1::JoinRequest& join, absl::Time now);
  std::vector<Outgoing> OnReport(SessionId session, const v1::NodeReport& report,
                                 absl::Time now);
  // The session's stream ended (agent exited, crashed, or its keepalive failed).
  std::vector<Outgoing> OnSessionClosed(SessionId session, absl::Time now);
  // Closes rounds whose last call expired and forgets old closed runs.
  std::vector<Outgoing> OnTick(absl::Time now);

  // The earliest time OnTick has something to do, if any.
  std::optional<absl::Time> NextDeadline() const;

  enum class RunState { kOpen, kActive, kClosed };
  // For status and tests: the state of a run, or nullopt when unknown.
  std::optional<RunState> StateOf(const std::string& run_id) const;

 private:
  struct Node {
    SessionId session = 0;
    v1::JoinRequest join;
    bool connected = true;
    bool reported = false;
  };
  struct Run {
    std::string run_id;
    int32_t min_nodes = 0;
    int32_t max_nodes = 0;
    int32_t nproc_per_node = 0;
    absl::Duration last_call_timeout;
    RunState state = RunState::kOpen;
    std::vector<Node> nodes;  // Joined (kOpen) or members in node-rank order (kActive).
    std::optional<absl::Time> last_call_deadline;
    int64_t round = 0;
    absl::Time closed_at;
  };

  void CloseRound(Run& run, std::vector<Outgoing>& out);
  void FinishRun(Run& run, const v1::RunFinished& finished, absl::Time now,
                 std::vector<Outgoing>& out);
  void SendProgress(const Run& run, std::vector<Outgoing>& out) const;
  static Outgoing ErrorFor(SessionId session, int code, std::string message);

  RoundStateOptions options_;
  std::map<std::string, Run> runs_;
  absl::flat_hash_map<SessionId, std::string> run_of_session_;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_ROUND_STATE_H_
