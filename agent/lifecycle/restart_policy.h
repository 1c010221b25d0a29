// RestartTracker: decides what a worker failure leads to under --restart-policy,
// --recovery-mode, --max-restarts and the rendezvous backend. It is the one owner of that
// decision: the table below (RestartTracker::Decide) is the whole of it, the agent only carries
// out the action. Pure logic on an injected clock, so the unit tests run without processes or
// sleeps (tests/agent/restart_policy_test.cc walks every cell).
//
//   policy          backend      nodes  restarts left       restarts used up
//   group           rendezvous   any    kReportToRendezvous kReportToRendezvous
//   group           static       1      kRestartGroup       kFail
//   group           static       > 1    kFail               kFail
//   rank            any          any    kRestartRank        kFail
//   rank + shrink   any          any    kDropRank           kFail
// and before the table: a failure of a worker from an attempt already replaced is kIgnore.
//
// - group (torchrun semantics): a failure stops every worker and starts them again with
//   TORCHELASTIC_RESTART_COUNT + 1. With a rendezvous service (c10d, --standalone) the restart
//   is a new round the service decides for every node, counting group restarts itself against
//   the --max-restarts each agent sends in its JoinRequest; the agent stops its workers and
//   reports. With the static backend there is no one to start a round for the other nodes, so a
//   group restarts only when it is the whole job (--nnodes=1); dgt-run already refuses
//   --max-restarts > 0 with the static multi-node form (exit 2, docs/EXIT_CODES.md), the table
//   says the same for any other caller.
// - rank: only the failed process is restarted, with the same RANK; its own restart count
//   (generation) goes up by one; every restart of any of this agent's ranks counts against
//   --max-restarts (the budget is per agent, i.e. per node; docs/RECOVERY.md).
// - rank with --recovery-mode shrink: the failed rank is not restarted (the survivors go on
//   without it); each lost rank still consumes one of --max-restarts, so --max-restarts=0 fails
//   the job on any failure, as with the other policies.
// Membership changes (a new rendezvous round) never consume restarts.
//
// Thread-compatible.
#ifndef DGT_AGENT_LIFECYCLE_RESTART_POLICY_H_
#define DGT_AGENT_LIFECYCLE_RESTART_POLICY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/flags/launch_options.h"

namespace dgt::agent {

// Time source (a seam for tests).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
};

// Who starts a group restart's new round (RestartTracker's table).
enum class RestartBackend {
  kRendezvous,  // A rendezvous service (c10d, --standalone): it decides rounds for every node.
  kStatic,      // --rdzv-backend=static: no service; the agent restarts only its own workers.
};

class RestartTracker {
 public:
  struct Options {
    RestartPolicy policy = RestartPolicy::kGroup;
    int max_restarts = 0;
    // Nodes in the current round. Group restarts across nodes need a new rendezvous round.
    int node_count = 1;
    // Rank policy only: continue without failed ranks instead of restarting them.
    bool shrink = false;
    // Where group restarts are decided (the table above).
    RestartBackend backend = RestartBackend::kRendezvous;
  };
  enum class Action {
    kRestartGroup,        // Stop every local worker, then start all with restart_count.
    kRestartRank,         // Start the failed rank again with restart_count.
    kDropRank,            // Shrink: do not restart the failed rank; the others go on without it.
    kIgnore,              // A worker of an attempt already being replaced: nothing to decide.
    kFail,                // Out of restarts (or not possible here): stop and report the failure.
    kReportToRendezvous,  // Stop every local worker and report: the service decides the round.
  };
  struct Decision {
    Action action = Action::kFail;
    int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT for the process(es) to start.
    std::string reason;     // For kFail and kIgnore, e.g. "--max-restarts=1 exhausted".
  };
  struct Event {
    absl::Time time;
    int rank = 0;
    Action action = Action::kFail;
    int restart_count = 0;
  };

  RestartTracker(Options options, const Clock* clock);

  // The table above: the action for a failure that is not stale. `restarts_left`: fewer than
  // --max-restarts restarts consumed so far.
  static Action Decide(RestartPolicy policy, bool shrink, RestartBackend backend, int node_count,
                       bool restarts_left);

  // A worker of global rank `rank`, started with TORCHELASTIC_RESTART_COUNT `attempt`, failed.
  Decision OnFailure(int rank, int attempt);

  // A new rendezvous round with `node_count` nodes (membership change: no restart consumed).
  void OnNewRound(int node_count) { options_.node_count = node_count; }

  // Restarts consumed so far.
  int restarts() const { return restarts_; }
  // The current attempt of the group (group policy) or of `rank` (rank policy).
  int attempt(int rank) const;
  // Every decision with its time, oldest first.
  const std::vector<Event>& history() const { return history_; }

 private:
  Decision Record(int rank, Decision d);

  Options options_;
  const Clock* clock_;
  int restarts_ = 0;
  int group_attempt_ = 0;
  std::map<int, int> rank_attempt_;
  std::vector<Event> history_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_LIFECYCLE_RESTART_POLICY_H_
