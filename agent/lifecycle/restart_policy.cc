#include "agent/lifecycle/restart_policy.h"

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

RestartTracker::Action RestartTracker::Decide(RestartPolicy policy, bool shrink,
                                              RestartBackend backend, int node_count,
                                              bool restarts_left) {
  if (policy == RestartPolicy::kGroup) {
    if (backend == RestartBackend::kRendezvous) return Action::kReportToRendezvous;
    return restarts_left && node_count == 1 ? Action::kRestartGroup : Action::kFail;
  }
  if (!restarts_left) return Action::kFail;
  return shrink ? Action::kDropRank : Action::kRestartRank;
}

RestartTracker::Decision RestartTracker::OnFailure(int rank, int attempt) {
  Decision d;
  if (attempt < this->attempt(rank)) {
    d.action = Action::kIgnore;
    d.restart_count = this->attempt(rank);
    d.reason = absl::StrCat("rank ", rank, " of attempt ", attempt, " is already replaced");
    return Record(rank, d);
  }
  const bool restarts_left = restarts_ < options_.max_restarts;
  d.action = Decide(options_.policy, options_.shrink, options_.backend, options_.node_count,
                    restarts_left);
  d.restart_count = attempt;
  switch (d.action) {
    case Action::kReportToRendezvous:
      d.reason = "group restarts are rounds of the rendezvous service";
      break;
    case Action::kFail:
      d.reason = restarts_left
                     ? absl::StrCat(
                           "the static backend restarts a group only with --nnodes=1, "
                           "this job has ",
                           options_.node_count, " nodes")
                     : absl::StrCat("--max-restarts=", options_.max_restarts, " exhausted");
      break;
    case Action::kRestartGroup:
      ++restarts_;
      group_attempt_ = attempt + 1;
      d.restart_count = group_attempt_;
      break;
    case Action::kRestartRank:
      ++restarts_;
      rank_attempt_[rank] = attempt + 1;
      d.restart_count = attempt + 1;
      break;
    case Action::kDropRank:
      ++restarts_;
      rank_attempt_[rank] = attempt + 1;
      d.reason = absl::StrCat("rank ", rank, " dropped (--recovery-mode=shrink)");
      break;
    case Action::kIgnore:
      break;
  }
  return Record(rank, d);
}

}  // namespace dgt::agent
