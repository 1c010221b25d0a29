// LeaderElection: replicas sharing one leader key elect one leader through an etcd lease
// (docs/ETCD.md, "Replicas"), active/standby as kube-controller-manager's leader election does.
// dgt-rendezvous replicas on one --etcd-prefix use it: only the leader serves agents and writes
// runs and jobs; the others are standbys.
//
// How: each replica grants itself a lease of `lease_ttl_s` seconds and claims the leader key with
// one Txn: create_revision(key) == 0 (absent) ? put(key, value, lease) : get(key). The winner keeps
// its lease alive (Client::KeepAlive, renewed every ttl/3) and watches the key; its term is
// the key's create_revision, which the state backends' writes compare (LeaderFence,
// etcd/fence.h), so a replica deposed since it won can never commit. A
// standby watches the key and claims it again as soon as it is deleted (the leader's lease ended:
// killed, partitioned, or it resigned), and at least every lease_ttl_s in any case.
//
// Timing: a leader killed without revoking its lease is replaced after etcd expires the lease
// (lease_ttl_s after its last renewal; etcd checks expiry every 500 ms) plus one watch event and
// one Txn. A leader that cannot renew (etcd unreachable) learns it lost within lease_ttl_s of its
// last renewal (LeaseKeeper's DEADLINE_EXCEEDED); meanwhile etcd may already have let another
// replica win, and the fence refuses the old leader's writes in that window. etcd 3.4 refuses a
// TTL below its minimum (raises it): 2 s with default etcd timing.
//
// The key's value: JSON {"replica": "<replica id>", "address": "<advertise HOST:PORT>"}.
//
// Thread-safety: thread-safe. Callbacks run on the election's own thread, one at a time, in the
// order won -> lost -> won ...; they may call Resign but must not destroy the election.
#ifndef DGT_ETCD_LEADER_ELECTION_H_
#define DGT_ETCD_LEADER_ELECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "etcd/client.h"

namespace dgt::etcd {

// The leader key of the replicas serving runs under `prefix` (--etcd-prefix): the prefix without
// its trailing '/' and ".leader" ("/dgt/runs/" -> "/dgt/runs.leader"), outside the runs' keys.
std::string LeaderKeyFor(absl::string_view prefix);

// What a leader key's value names; `replica` empty when the value is not of this shape.
struct LeaderInfo {
  std::string replica;
  std::string address;
};
std::string EncodeLeaderInfo(const LeaderInfo& info);
LeaderInfo DecodeLeaderInfo(absl::string_view value);

struct LeaderElectionOptions {
  ClientOptions client;
  std::string key;          // LeaderKeyFor(--etcd-prefix).
  std::string replica_id;   // --replica-id.
  std::string address;      // --advertise-address, what agents reach this replica at.
  int64_t lease_ttl_s = 2;  // --leader-lease-s (>= 1).
  // This replica won; `term` is the leader key's create_revision (the fence).
  std::function<void(int64_t term)> on_won;
  // This replica lost the leadership it held (lease lost, key deleted or replaced, Resign, or
  // Stop): `why` says which.
  std::function<void(const absl::Status& why)> on_lost;
  // As a standby: the leader now (replica empty: no leader now).
  std::function<void(const LeaderInfo& leader)> on_leader;
};

class LeaderElection {
 public:
  // Starts campaigning on a thread of its own. Errors: INVALID_ARGUMENT for an empty key or
  // replica id, a TTL < 1, or bad client options.
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Start(LeaderElectionOptions options);
  // Stop().
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Stops campaigning; a leader revokes its lease (deleting the key, so that a standby takes over
  // at once; bounded by the client's call_timeout) and on_lost is called. Idempotent.
  void Stop();
  // The leader gives up: on_lost(why) on the election's thread, its lease revoked (the key goes),
  // then it campaigns again (and may win again at once: a replica whose commit failed re-reads the
  // runs when it takes over). Does nothing on a standby. Never blocks.
  void Resign(const absl::Status& why);

  bool is_leader() const;
  // Leader terms won so far.
  int64_t terms_won() const;

 private:
  explicit LeaderElection(LeaderElectionOptions options);
  void Loop();
  // One campaign: claims the key; true when won (then leads until the leadership ends).
  void Campaign();
  // Leads until the lease is lost, the key changes, Resign or Stop; then gives the key up.
  void Lead(int64_t lease, int64_t term);
  // Waits up to `timeout` for Stop or (when `wake` is set) an event; returns whether stopping.
  bool WaitFor(absl::Duration timeout);

  LeaderElectionOptions options_;
  std::unique_ptr<Client> client_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  // Set by the lease keeper, the watch or Resign: why the leadership (or the standby's wait)
  // ends; OK while none.
  absl::Status wake_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  int64_t terms_won_ ABSL_GUARDED_BY(mu_) = 0;
  // A lease of an earlier term not known to be gone (revoked when etcd answers again, so that
  // this replica's old key does not wait for its TTL after etcd returns).
  int64_t stale_lease_ = 0;
  std::thread thread_;
};

}  // namespace dgt::etcd

#endif  // DGT_ETCD_LEADER_ELECTION_H_
