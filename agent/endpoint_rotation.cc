#include "agent/endpoint_rotation.h"

#include <algorithm>
#include <random>
#include <utility>

namespace dgt::agent {
namespace {

constexpr absl::Duration kFirstPause = absl::Milliseconds(100);
constexpr absl::Duration kMaxPauseOne = absl::Seconds(5);
constexpr absl::Duration kMaxPauseSeveral = absl::Milliseconds(200);

double RandomJitter() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return jitter(rng);
}

}  // namespace

EndpointRotation::EndpointRotation(std::vector<std::string> endpoints,
                                   std::function<double()> jitter)
    : endpoints_(std::move(endpoints)),
      jitter_(jitter ? std::move(jitter) : std::function<double()>(RandomJitter)),
      backoff_(kFirstPause) {
  if (endpoints_.empty()) endpoints_.emplace_back();
}

absl::Duration EndpointRotation::Backoff() {
  const absl::Duration pause = backoff_ * std::clamp(jitter_(), 0.5, 1.0);
  backoff_ = std::min(backoff_ * 2, several() ? kMaxPauseSeveral : kMaxPauseOne);
  return pause;
}

absl::Duration EndpointRotation::OnLost() {
  backoff_ = kFirstPause;
  failed_in_pass_ = 0;
  if (!several()) return Backoff();
  index_ = (index_ + 1) % endpoints_.size();
  return absl::ZeroDuration();
}

absl::Duration EndpointRotation::OnAttemptFailed() {
  if (!several()) return Backoff();
  index_ = (index_ + 1) % endpoints_.size();
  if (++failed_in_pass_ < endpoints_.size()) return absl::ZeroDuration();
  failed_in_pass_ = 0;
  return Backoff();
}

void EndpointRotation::OnAccepted() {
  backoff_ = kFirstPause;
  failed_in_pass_ = 0;
}

}  // namespace dgt::agent
