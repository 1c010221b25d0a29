// Which endpoint of a replicated service a client tries next, and how long it pauses first: one
// service, or several replicas of one ("a:29400,b:29400"; only the leader serves, a standby
// answers UNAVAILABLE with a NotLeader, replica/leadership_status.h).
//
// Defaults (dgt-run's agent): one endpoint: every retry goes to it, after a jittered exponential
// backoff (half to all of 100 ms, doubling up to 5 s). Several: a failed attempt (refused,
// unreachable, a standby) moves to the next endpoint at once; after a full pass over the list
// without an accepted session the client pauses half to all of 100 ms, doubling up to 200 ms, so
// that a replica taking over (its etcd lease: seconds) is found within one pass of its start. A
// lost session starts a new pass at the endpoint after the lost one, which is tried last.
// RotationOptions::pause_per_pass = false (dgt-agent) pauses after every failed attempt instead.
// The caller's windows bound the whole.
//
// Pure (no clock, no I/O); the jitter comes from RotationOptions::jitter (values in [0.5, 1]).
// Thread-compatible.
#ifndef DGT_REPLICA_ENDPOINT_ROTATION_H_
#define DGT_REPLICA_ENDPOINT_ROTATION_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dgt::replica {

struct RotationOptions {
  // The first pause of a backoff; each further one doubles, up to the maximum.
  absl::Duration first_pause = absl::Milliseconds(100);
  // The longest pause with one endpoint, and with several.
  absl::Duration max_pause_one = absl::Seconds(5);
  absl::Duration max_pause_several = absl::Milliseconds(200);
  // Several endpoints: pause only after a full pass without success (true), or after every
  // failed attempt (false).
  bool pause_per_pass = true;
  // The factor applied to each pause, clamped to [0.5, 1]; empty: uniformly random.
  std::function<double()> jitter;
};

class EndpointRotation {
 public:
  // `endpoints`: "host:port" each, at least one (an empty list is treated as {""}).
  EndpointRotation(std::vector<std::string> endpoints, RotationOptions options);
  // The defaults with `jitter` (empty: uniformly random).
  explicit EndpointRotation(std::vector<std::string> endpoints,
                            std::function<double()> jitter = {});

  const std::string& current() const { return endpoints_[index_]; }
  size_t index() const { return index_; }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  bool several() const { return endpoints_.size() > 1; }

  // The session at current(), which had been accepted, was lost. Returns the pause before the
  // next attempt, which goes to the next endpoint (several: no pause) or to the same one (one:
  // the first backoff step, 50..100 ms).
  absl::Duration OnLost();
  // An attempt at current() failed before the service accepted the session. Returns the pause
  // before the next attempt (which goes to current() after the call): several endpoints: zero
  // within a pass, the pass pause after the last endpoint of a pass; one: the next backoff step.
  absl::Duration OnAttemptFailed();
  // An attempt at current() failed in a way another endpoint would not fix (a refusal of this
  // client). Returns the next backoff step; the next attempt goes to current() again.
  absl::Duration OnRefused();
  // current() accepted the session: passes and backoff start over.
  void OnAccepted();
  // The next attempt goes to endpoints()[index % size] (a standby named it the leader, see
  // endpoint_list.h LeaderIndex); the pass and the backoff go on.
  void MoveTo(size_t index);
  // The list changed (a reloaded config): the next attempt goes to its first endpoint; the
  // backoff goes on.
  void SetEndpoints(std::vector<std::string> endpoints);

 private:
  absl::Duration Backoff();

  std::vector<std::string> endpoints_;
  RotationOptions options_;
  size_t index_ = 0;
  size_t failed_in_pass_ = 0;  // Failed attempts since the pass began.
  absl::Duration backoff_;     // The next pause before jitter.
};

}  // namespace dgt::replica

#endif  // DGT_REPLICA_ENDPOINT_ROTATION_H_
