// LeaderFence: the fence that keeps a deposed leader from writing. Replicas elect a leader on a
// leader key (etcd/leader_election.h); the leader's term is the key's create_revision. Each write
// of the leader is one Txn that also compares create_revision(leader key) == its term, so that a
// replica deposed since it won (its lease ended, the key is gone or another replica's) can never
// write. Both etcd state backends (runs and jobs) guard their writes with it.
//
// A write the fence refuses fails FAILED_PRECONDITION "fenced: ..." naming the key and both
// revisions; with no term set (0: this replica holds no leader key) every write is refused so.
// An empty leader key turns the fence off (a single server: every write passes).
//
// Thread-safety: thread-safe. The election's thread sets the term while a write may be in
// flight; a write uses the term it read when it started (term()).
#ifndef DGT_ETCD_FENCE_H_
#define DGT_ETCD_FENCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "etcd/client.h"

namespace dgt::etcd {

class LeaderFence {
 public:
  // `leader_key`: the replicas' leader key (LeaderKeyFor), or empty: no fence. `records`: what
  // the guarded writes write, for the refusal ("runs", "jobs").
  LeaderFence(std::string leader_key, std::string records);

  bool enabled() const { return !leader_key_.empty(); }
  const std::string& leader_key() const { return leader_key_; }

  // The create_revision of the leader key this replica holds (its term), or 0 when it holds none.
  void set_term(int64_t create_revision) { term_.store(create_revision); }
  int64_t term() const { return term_.load(); }

  // Adds the fence's compare to `compares` and a read of the leader key to `otherwise` (the
  // Txn's else branch), for a write made in `term` (term() read once by the caller). Does
  // nothing when the fence is off. Errors: FAILED_PRECONDITION "fenced: this replica holds no
  // leader key (<key>): only the leader writes <records>" when `term` is 0.
  absl::Status Guard(int64_t term, std::vector<Compare>& compares,
                     std::vector<Op>& otherwise) const;
  // After a guarded Txn: OK when it succeeded, when the fence is off, or when the leader key
  // (read by the else branch's op `index`) is still the one created at `term` (another compare
  // failed). Else FAILED_PRECONDITION "fenced: the leader key <key> is gone|was created at
  // revision N, this replica's term began at revision T: it is no longer the leader".
  absl::Status Check(int64_t term, const TxnResult& txn, size_t index) const;

  // One guarded write of a single op: Txn(fence compare, {op}, {read of the leader key}).
  // Returns the op's result count (keys deleted for a delete; 0 for a put). Errors: Guard's and
  // Check's (FAILED_PRECONDITION), and the client's. With the fence off, the op's plain call.
  absl::StatusOr<int64_t> Write(Client& client, Op op) const;

 private:
  const std::string leader_key_;
  const std::string records_;
  std::atomic<int64_t> term_{0};
};

}  // namespace dgt::etcd

#endif  // DGT_ETCD_FENCE_H_
