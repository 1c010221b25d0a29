#include "agent/restart_policy.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dgt::agent {

absl::Time RealClock::Now() const { return absl::Now(); }

RestartTracker::RestartTracker(Options options, const Clock* clock)
    : options_(options), clock_(clock) {}

int RestartTracker::attempt(int rank) const {
  if (options_.policy == RestartPolicy::kGroup) return group_attempt_;
  auto it = rank_attempt_.find(rank);
  return it == rank_attempt_.end() ? 0 : it->second;
}

RestartTracker::Decision RestartTracker::Record(int rank, Decision d) {
  history_.push_back(Event{clock_->Now(), rank, d.action, d.restart_count});
  return d;
}

RestartTracker::Decision RestartTracker::OnFailure(int rank, int attempt) {
  Decision d;
  if (attempt < this->attempt(rank)) {
    d.action = Action::kIgnore;
    d.restart_count = this->attempt(rank);
    d.reason = absl::StrCat("rank ", rank, " of attempt ", attempt, " is already replaced");
    return Record(rank, d);
  }
  if (restarts_ >= options_.max_restarts) {
    d.action = Action::kFail;
    d.restart_count = attempt;
    d.reason = absl::StrCat("--max-restarts=", options_.max_restarts, " exhausted");
    return Record(rank, d);
  }
  if (options_.policy == RestartPolicy::kGroup) {
    if (options_.node_count > 1) {
      // TODO(issue 4): ask the rendezvous for a new round so that every node restarts its
      // workers with TORCHELASTIC_RESTART_COUNT + 1.
      d.action = Action::kFail;
      d.restart_count = attempt;
      d.reason = "group restarts across several nodes are not supported yet";
      return Record(rank, d);
    }
    ++restarts_;
    group_attempt_ = attempt + 1;
    d.action = Action::kRestartGroup;
    d.restart_count = group_attempt_;
    return Record(rank, d);
  }
  ++restarts_;
  rank_attempt_[rank] = attempt + 1;
  if (options_.shrink) {
    d.action = Action::kDropRank;
    d.restart_count = attempt;
    d.reason = absl::StrCat("rank ", rank, " dropped (--recovery-mode=shrink)");
    return Record(rank, d);
  }
  d.action = Action::kRestartRank;
  d.restart_count = attempt + 1;
  return Record(rank, d);
}

}  // namespace dgt::agent
