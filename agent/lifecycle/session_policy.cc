#include "agent/lifecycle/session_policy.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/exit_codes.h"

namespace dgt::agent {

SessionPolicy::SessionPolicy(Options options) : options_(options) {}

void SessionPolicy::OnFirstOpened(absl::Time now) {
  open_ = true;
  // An open stream may still be a standby's refusal: the service must take the session within
  // the connect timeout too.
  first_accept_deadline_ = now + options_.connect_timeout;
}

uint64_t SessionPolicy::NewAttempt() {
  open_ = false;
  return ++generation_;
}

void SessionPolicy::OnReopened(std::optional<int64_t> rejoin_round) {
  open_ = true;
  accepted_ = false;
  rejoin_round_ = rejoin_round;
}

SessionPolicy::Answer SessionPolicy::OnAnswer(const std::string& endpoint) {
  Answer answer;
  if (!accepted_) {
    accepted_ = true;
    ever_accepted_ = true;
    first_accept_deadline_.reset();
    standby_answers_.clear();
    answer.accepted_now = true;
    if (options_.several && !lost_endpoint_.empty() && lost_endpoint_ != endpoint) {
      answer.took_over_from = lost_endpoint_;
    }
    lost_endpoint_.clear();
  }
  // A fresh join after reconnecting is answered: the service is back. (A rejoin's answer is its
  // Assignment, OnRejoined.)
  if (lost() && !rejoin_round_) {
    reconnect_deadline_.reset();
    answer.service_back = true;
  }
  return answer;
}

bool SessionPolicy::OnRefused(NodeState state) {
  const bool rejoin = rejoin_round_.has_value() && state != NodeState::kJoining;
  if (rejoin) {
    rejoin_round_.reset();
    reconnect_deadline_.reset();
  }
  return rejoin;
}

void SessionPolicy::OnRejoined() {
  rejoin_round_.reset();
  reconnect_deadline_.reset();
}

SessionPolicy::Lost SessionPolicy::OnLost(const std::string& endpoint,
                                          const std::optional<std::string>& standby_message,
                                          absl::Time now, NodeState state,
                                          bool group_restart_left) {
  Lost lost;
  // A session the service had taken was lost; one it never took (a standby replica, a service
  // going down) is a failed attempt: the next endpoint, or the backoff's next step.
  lost.was_accepted = accepted_;
  accepted_ = false;
  if (lost.was_accepted) lost_endpoint_ = endpoint;
  lost.first = !reconnect_deadline_;
  if (lost.first) reconnect_deadline_ = now + options_.reconnect_timeout;
  if (standby_message) {
    // While no replica leads, every pass gets the same answers: the runtime logs a changed one.
    lost.standby = true;
    std::string& last = standby_answers_[endpoint];
    lost.standby_changed = last != *standby_message;
    last = *standby_message;
  }
  // Running workers without a restart left: another node's failure (its done mark) stops them
  // even while the service is away.
  lost.poll_marks =
      state == NodeState::kAwaitingOutcome || (state == NodeState::kRunning && !group_restart_left);
  return lost;
}

absl::Duration SessionPolicy::LostFor(absl::Time now) const {
  if (!reconnect_deadline_) return absl::ZeroDuration();
  return now - (*reconnect_deadline_ - options_.reconnect_timeout);
}

absl::Duration SessionPolicy::WindowLeft(absl::Time now) const {
  if (!reconnect_deadline_) return absl::ZeroDuration();
  return std::max(*reconnect_deadline_ - now, absl::ZeroDuration());
}

SessionPolicy::Step SessionPolicy::NextStep(absl::Time now) const {
  if (!reconnect_deadline_) return Step::kIdle;
  if (first_accept_deadline_ && !standby_answers_.empty() && now >= *first_accept_deadline_) {
    // Replicas answer, but none leads: waiting out the join timeout would not change that.
    return Step::kNoLeader;
  }
  if (now >= *reconnect_deadline_) return Step::kWindowOver;
  return Step::kAttempt;
}

int SessionPolicy::NoLeaderExitStatus() { return kExitRendezvousUnavailable; }

int SessionPolicy::OpenFailureExitStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
      return kExitRendezvousUnavailable;
    case absl::StatusCode::kUnauthenticated:
      return kExitNotAdmitted;
    default:
      return kExitLauncherError;
  }
}

std::string SessionPolicy::NoLeaderMessage(const std::vector<std::string>& endpoints) const {
  std::vector<std::string> answers;
  for (const std::string& endpoint : endpoints) {
    auto it = standby_answers_.find(endpoint);
    answers.push_back(it == standby_answers_.end() ? absl::StrCat(endpoint, ": no answer")
                                                   : absl::StrCat(endpoint, ": ", it->second));
  }
  return absl::StrCat("no rendezvous replica of ", endpoints.size(), " took the session within ",
                      absl::FormatDuration(options_.connect_timeout),
                      ": every one that answered is a standby (", absl::StrJoin(answers, "; "),
                      "); is the leader's address in --rdzv-endpoint? see --rdzv-connect-timeout");
}

}  // namespace dgt::agent
