// Which rendezvous endpoint an agent tries next, and how long it pauses first, when
// --rdzv-endpoint names one service or several replicas of one ("a:29400,b:29400"; the HA
// replica contract: only the leader replica serves sessions, a standby answers UNAVAILABLE with
// a NotLeader, replica/leadership_status.h).
//
// One endpoint: every retry goes to it, after a jittered exponential backoff (half to all of
// 100 ms, doubling up to 5 s), as dgt-run always did for a restarted service.
// Several: a failed attempt (refused, unreachable, a standby) moves to the next endpoint at once;
// after a full pass over the list without an accepted session the agent pauses half to all of
// 100 ms, doubling up to 200 ms, so that a replica taking over (its etcd lease: seconds) is found
// within one pass of its start. A lost session starts a new pass at the endpoint after the lost
// one, which is tried last. The caller's windows (--rdzv-connect-timeout, --rdzv-conf
// read_timeout) bound the whole.
//
// Pure (no clock, no I/O); the jitter comes from `jitter` (values in [0.5, 1]). Thread-compatible.
#ifndef DGT_AGENT_ENDPOINT_ROTATION_H_
#define DGT_AGENT_ENDPOINT_ROTATION_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dgt::agent {

class EndpointRotation {
 public:
  // `endpoints`: "host:port" each, at least one (an empty list is treated as {""}). `jitter`:
  // the factor applied to each pause, in [0.5, 1]; empty: uniformly random.
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
  // current() accepted the session: passes and backoff start over.
  void OnAccepted();

 private:
  absl::Duration Backoff();

  std::vector<std::string> endpoints_;
  std::function<double()> jitter_;
  size_t index_ = 0;
  size_t failed_in_pass_ = 0;  // Failed attempts since the pass began.
  absl::Duration backoff_;     // The next pause before jitter.
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_ENDPOINT_ROTATION_H_
