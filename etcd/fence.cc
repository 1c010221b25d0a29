#include "etcd/fence.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dgt::etcd {

LeaderFence::LeaderFence(std::string leader_key, std::string records)
    : leader_key_(std::move(leader_key)), records_(std::move(records)) {}

absl::Status LeaderFence::Guard(int64_t term, std::vector<Compare>& compares,
                                std::vector<Op>& otherwise) const {
  if (!enabled()) return absl::OkStatus();
  if (term == 0) {
    return absl::FailedPreconditionError(absl::StrCat("fenced: this replica holds no leader key (",
                                                      leader_key_, "): only the leader writes ",
                                                      records_));
  }
  compares.push_back(Compare::CreateRevisionIs(leader_key_, term));
  otherwise.push_back(Op::Get(leader_key_));
  return absl::OkStatus();
}

absl::Status LeaderFence::Check(int64_t term, const TxnResult& txn, size_t index) const {
  if (!enabled() || txn.succeeded) return absl::OkStatus();
  int64_t holder = 0;
  if (index < txn.results.size() && !txn.results[index].kvs.empty()) {
    holder = txn.results[index].kvs[0].create_revision;
  }
  if (holder == term) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "fenced: the leader key ", leader_key_,
      holder == 0 ? " is gone" : absl::StrCat(" was created at revision ", holder),
      ", this replica's term began at revision ", term, ": it is no longer the leader"));
}

absl::StatusOr<int64_t> LeaderFence::Write(Client& client, Op op) const {
  if (!enabled()) {
    if (op.type == Op::Type::kPut) {
      absl::StatusOr<int64_t> put = client.Put(op.key, op.value, op.lease);
      if (!put.ok()) return put.status();
      return 0;
    }
    if (op.type == Op::Type::kDelete) return client.Delete(op.key);
  }
  const int64_t term = this->term();
  std::vector<Compare> compares;
  std::vector<Op> otherwise;
  if (absl::Status guarded = Guard(term, compares, otherwise); !guarded.ok()) return guarded;
  absl::StatusOr<TxnResult> txn = client.Txn(compares, {std::move(op)}, otherwise);
  if (!txn.ok()) return txn.status();
  if (!txn->succeeded) {
    absl::Status checked = Check(term, *txn, 0);
    // The fence's compare is the only one: a Txn that failed it is fenced.
    return checked.ok() ? absl::AbortedError(absl::StrCat("the fenced write of ", leader_key_,
                                                          " failed its compare"))
                        : checked;
  }
  return txn->results.empty() ? 0 : txn->results[0].count;
}

}  // namespace dgt::etcd
