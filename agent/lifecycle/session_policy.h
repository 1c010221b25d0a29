// SessionPolicy: the agent's decisions about its rendezvous session, pure and on an injected
// clock, in the shape of NodeLifecycle. It owns the session's generation (callbacks of a
// replaced session are dropped), whether the service took the session, the reconnect window
// while the service is lost (--rdzv-conf read_timeout), the standby answers of the replicas,
// the rejoin awaiting its answer, when to read the done marks while the service is away, and
// the exit status when no replica leads (69).
//
// The runtime (Agent) opens the streams, moves the endpoint rotation (agent/endpoint_rotation.h)
// as the returned steps say, logs, and hands the events here. No I/O, no threads, no clock of its
// own: tests/agent/session_policy_test.cc drives it through a fake session on a simulated clock.
//
// Thread-compatible: the agent calls it from its event loop only.
#ifndef DGT_AGENT_LIFECYCLE_SESSION_POLICY_H_
#define DGT_AGENT_LIFECYCLE_SESSION_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/lifecycle/node_lifecycle.h"

namespace dgt::agent {

class SessionPolicy {
 public:
  struct Options {
    // --rdzv-conf read_timeout: how long a lost service is tried again before the run is left.
    absl::Duration reconnect_timeout = absl::Seconds(60);
    // --rdzv-connect-timeout: by when a session must first be accepted, else a service whose
    // replicas all answer as standbys ends the agent (69).
    absl::Duration connect_timeout = absl::Seconds(60);
    bool several = false;  // Several replicas (--rdzv-endpoint a:1,b:2).
  };

  explicit SessionPolicy(Options options);

  // --- The session ---------------------------------------------------------------------------
  // The generation of the current session: callbacks carrying another one are stale.
  uint64_t generation() const { return generation_; }
  bool IsCurrent(uint64_t generation) const { return generation == generation_; }
  // The first session was opened at `now` (Prepare): one must be accepted within
  // connect_timeout.
  void OnFirstOpened(absl::Time now);
  // A new connection attempt starts: returns its generation; the current session is not open.
  uint64_t NewAttempt();
  // The agent stops: every later callback of the session is stale.
  void Retire() { ++generation_; }
  // A reconnect attempt opened a session and sends its join; `rejoin_round`: the round the join
  // asks back (JoinRequest.rejoin).
  void OnReopened(std::optional<int64_t> rejoin_round);
  // The stream ended (its closed callback).
  void OnClosed() { open_ = false; }
  bool open() const { return open_; }
  // A session was accepted once: "reconnected", not "connected".
  bool ever_accepted() const { return ever_accepted_; }
  // A rejoin awaits its answer.
  const std::optional<int64_t>& rejoin_round() const { return rejoin_round_; }
  // Whether `endpoint` answered as a standby since a session was last accepted.
  bool AnsweredAsStandby(const std::string& endpoint) const {
    return standby_answers_.count(endpoint) > 0;
  }

  // The service answered the session with a message that is not an Error. Returns the replica
  // whose session was lost when this answer is the first of a session that replaced it at
  // another replica (the runtime says so), else empty. Ends the reconnect window unless a
  // rejoin awaits its answer.
  struct Answer {
    bool accepted_now = false;   // The first answer of this session: rotation's OnAccepted.
    std::string took_over_from;  // Several replicas: the lost replica another one replaced.
    bool service_back = false;   // The reconnect window ends (ServiceBack).
  };
  Answer OnAnswer(const std::string& endpoint);
  // The service answered with an Error in `state`. Returns whether it answered a rejoin (the run
  // went on without this node); then the reconnect window ends.
  bool OnRefused(NodeState state);
  // The rejoin was answered, with this node's round or as a fresh join of a run that waits for
  // nodes: the reconnect window ends.
  void OnRejoined();

  // --- The service lost ----------------------------------------------------------------------
  // The session at `endpoint` ended at `now` (Reconnect). `standby_message`: the answer when it
  // ended as a standby replica's. `state` and `group_restart_left` are the lifecycle's.
  struct Lost {
    bool first = false;            // The reconnect window opens now.
    bool was_accepted = false;     // The service had taken the session: rotation's OnLost, else
                                   // OnAttemptFailed.
    bool standby = false;          // A standby replica's answer.
    bool standby_changed = false;  // ... that differs from that replica's last one.
    bool poll_marks = false;       // Read the done marks (another node's failure stops workers).
  };
  Lost OnLost(const std::string& endpoint, const std::optional<std::string>& standby_message,
              absl::Time now, NodeState state, bool group_restart_left);
  bool lost() const { return reconnect_deadline_.has_value(); }
  // How long the service has been away at `now` (zero when it is not lost).
  absl::Duration LostFor(absl::Time now) const;
  // Time left of the reconnect window at `now` (zero when it is over or not open).
  absl::Duration WindowLeft(absl::Time now) const;
  // The reconnect window ends (the service is back, or the run is left).
  void EndWindow() { reconnect_deadline_.reset(); }

  // What the reconnect loop does next at `now`.
  enum class Step {
    kIdle,        // The service is not lost: nothing to do.
    kAttempt,     // Try the next endpoint (after the rotation's pause).
    kNoLeader,    // Every replica that answered is a standby past connect_timeout: Finish with
                  // NoLeaderExitStatus() and NoLeaderMessage().
    kWindowOver,  // The read timeout passed: NodeLifecycle::OnReconnectWindowOver.
  };
  Step NextStep(absl::Time now) const;

  // The exit status when no replica leads: 69 (kExitRendezvousUnavailable).
  static int NoLeaderExitStatus();
  // The exit status when the first session could not be opened with `code`: 69 for
  // DeadlineExceeded (no replica reached), 77 for Unauthenticated (TLS settings that disagree
  // with the service), else 1.
  static int OpenFailureExitStatus(absl::StatusCode code);
  // "no rendezvous replica of N took the session within T: every one that answered is a standby
  // (a:1: standby: ...; b:2: no answer); ...". `endpoints`: every replica, in flag order.
  std::string NoLeaderMessage(const std::vector<std::string>& endpoints) const;

 private:
  Options options_;
  uint64_t generation_ = 0;
  bool open_ = false;
  bool accepted_ = false;  // The service answered the current session (not an Error).
  bool ever_accepted_ = false;
  std::string lost_endpoint_;  // The replica whose session was lost last.
  std::optional<absl::Time> first_accept_deadline_;
  std::optional<absl::Time> reconnect_deadline_;  // Set while the service is lost.
  std::optional<int64_t> rejoin_round_;
  // Each endpoint's last standby answer since a session was last accepted.
  std::map<std::string, std::string> standby_answers_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_LIFECYCLE_SESSION_POLICY_H_
