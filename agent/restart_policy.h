// RestartTracker: decides what a worker failure leads to under --restart-policy and
// --max-restarts. Pure logic on an injected clock, so the Agent only carries out decisions and
// the unit tests run without processes or sleeps.
//
// - group (torchrun semantics): a failure stops every worker and starts them again with
//   TORCHELASTIC_RESTART_COUNT + 1. Failures of workers from an attempt that is already being
//   replaced (the others dying while the group stops) do not consume restarts.
// - rank: only the failed process is restarted, with the same RANK; its own restart count
//   (generation) goes up by one; every restart of any of this agent's ranks counts against
//   --max-restarts (the budget is per agent, i.e. per node; docs/RECOVERY.md).
// - rank with --recovery-mode shrink: the failed rank is not restarted (the survivors go on
//   without it); each lost rank still consumes one of --max-restarts, so --max-restarts=0 fails
//   the job on any failure, as with the other policies.
// Membership changes (a new rendezvous round) never consume restarts.
//
// Thread-compatible.
#ifndef DGT_AGENT_RESTART_POLICY_H_
#define DGT_AGENT_RESTART_POLICY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/launch_options.h"

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

class RestartTracker {
 public:
  struct Options {
    RestartPolicy policy = RestartPolicy::kGroup;
    int max_restarts = 0;
    // Nodes in the current round. Group restarts across nodes need a new rendezvous round.
    int node_count = 1;
    // Rank policy only: continue without failed ranks instead of restarting them.
    bool shrink = false;
  };
  enum class Action {
    kRestartGroup,  // Stop every local worker, then start all with restart_count.
    kRestartRank,   // Start the failed rank again with restart_count.
    kDropRank,      // Shrink: do not restart the failed rank; the others go on without it.
    kIgnore,        // A worker of an attempt already being replaced: nothing to decide.
    kFail,          // Out of restarts (or not possible here): stop and report the failure.
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

#endif  // DGT_AGENT_RESTART_POLICY_H_
