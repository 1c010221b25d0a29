#include "replica/endpoint_rotation.h"

#include <algorithm>
#include <random>
#include <utility>

namespace dgt::replica {
namespace {

double RandomJitter() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return jitter(rng);
}

RotationOptions WithJitter(std::function<double()> jitter) {
  RotationOptions options;
  options.jitter = std::move(jitter);
  return options;
}

}  // namespace

EndpointRotation::EndpointRotation(std::vector<std::string> endpoints, RotationOptions options)
    : endpoints_(std::move(endpoints)),
      options_(std::move(options)),
      backoff_(options_.first_pause) {
  if (!options_.jitter) options_.jitter = RandomJitter;
  if (endpoints_.empty()) endpoints_.emplace_back();
}

EndpointRotation::EndpointRotation(std::vector<std::string> endpoints,
                                   std::function<double()> jitter)
    : EndpointRotation(std::move(endpoints), WithJitter(std::move(jitter))) {}

absl::Duration EndpointRotation::Backoff() {
  const absl::Duration pause = backoff_ * std::clamp(options_.jitter(), 0.5, 1.0);
  backoff_ =
      std::min(backoff_ * 2, several() ? options_.max_pause_several : options_.max_pause_one);
  return pause;
}

absl::Duration EndpointRotation::OnLost() {
  backoff_ = options_.first_pause;
  failed_in_pass_ = 0;
  if (!several()) return Backoff();
  index_ = (index_ + 1) % endpoints_.size();
  return absl::ZeroDuration();
}

absl::Duration EndpointRotation::OnAttemptFailed() {
  if (!several()) return Backoff();
  index_ = (index_ + 1) % endpoints_.size();
  if (!options_.pause_per_pass) return Backoff();
  if (++failed_in_pass_ < endpoints_.size()) return absl::ZeroDuration();
  failed_in_pass_ = 0;
  return Backoff();
}

absl::Duration EndpointRotation::OnRefused() { return Backoff(); }

void EndpointRotation::OnAccepted() {
  backoff_ = options_.first_pause;
  failed_in_pass_ = 0;
}

void EndpointRotation::MoveTo(size_t index) { index_ = index % endpoints_.size(); }

void EndpointRotation::SetEndpoints(std::vector<std::string> endpoints) {
  endpoints_ = std::move(endpoints);
  if (endpoints_.empty()) endpoints_.emplace_back();
  index_ = 0;
  failed_in_pass_ = 0;
}

}  // namespace dgt::replica
