// EtcdRunStateBackend's stages and fenced writes (rendezvous/etcd_run_state_backend.h); its view
// of the runs, fed by the watch, is etcd_run_state_view.cc.
#include "rendezvous/etcd_run_state_backend.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace dgt::rendezvous {
namespace {

// About the bytes of an etcd TxnRequest with these parts: their keys and values, and 16 bytes
// of framing per part.
int64_t TxnBytes(const std::vector<etcd::Compare>& compares, const std::vector<etcd::Op>& then,
                 const std::vector<etcd::Op>& otherwise) {
  int64_t bytes = 0;
  for (const etcd::Compare& c : compares)
    bytes += 16 + static_cast<int64_t>(c.key.size() + c.value.size());
  for (const std::vector<etcd::Op>* ops : {&then, &otherwise}) {
    for (const etcd::Op& op : *ops)
      bytes += 16 + static_cast<int64_t>(op.key.size() + op.value.size());
  }
  return bytes;
}

// Whether two records differ in one node, by bucket: marks the bucket of every node added,
// removed or changed between `before` and `after` (both sorted by node id). O(nodes).
void MarkChangedBuckets(const std::map<std::string, NodeRecord>& before,
                        const std::map<std::string, NodeRecord>& after, int buckets,
                        std::vector<bool>* dirty) {
  auto b = before.begin();
  auto a = after.begin();
  while (b != before.end() || a != after.end()) {
    if (a == after.end() || (b != before.end() && b->first < a->first)) {
      (*dirty)[NodeBucket(b->first, buckets)] = true;
      ++b;
    } else if (b == before.end() || a->first < b->first) {
      (*dirty)[NodeBucket(a->first, buckets)] = true;
      ++a;
    } else {
      if (!(a->second == b->second)) (*dirty)[NodeBucket(a->first, buckets)] = true;
      ++a;
      ++b;
    }
  }
}

std::string LeaseGone(LeaseId lease) {
  return absl::StrCat("lease ", lease, " does not exist (expired?)");
}

}  // namespace

EtcdRunStateBackend::EtcdRunStateBackend(Options options)
    : options_(std::move(options)), fence_(options_.leader_key, "runs") {
  std::random_device rd;
  replica_id_ =
      absl::StrCat(absl::Hex((static_cast<uint64_t>(rd()) << 32) | rd(), absl::kZeroPad16));
}

EtcdRunStateBackend::~EtcdRunStateBackend() { watcher_.reset(); }

bool EtcdRunStateBackend::DropStage(absl::string_view run_id) {
  auto it = stages_.find(run_id);
  if (it == stages_.end()) return false;
  stages_.erase(it);
  return true;
}

std::string EtcdRunStateBackend::NextWriter() { return absl::StrCat(replica_id_, ":", ++writes_); }

int64_t EtcdRunStateBackend::decided_after_lost_answer() const {
  MutexLock lock(&mu_);
  return decided_;
}

absl::StatusOr<RunRecord*> EtcdRunStateBackend::Create(absl::string_view run_id) {
  ReleaseRetired();
  if (absl::StrContains(run_id, kNodeBucketSeparator)) {
    return absl::InvalidArgumentError(
        absl::StrCat("run id '", absl::CHexEscape(run_id),
                     "' has the byte 0x1f, which the etcd backend's keys reserve"));
  }
  if (Find(run_id) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("run '", run_id, "' already exists"));
  }
  Stage& stage = stages_[std::string(run_id)];
  stage.run.run_id = std::string(run_id);
  return &stage.run;
}

RunRecord* EtcdRunStateBackend::Mutable(absl::string_view run_id) {
  ReleaseRetired();
  if (auto stage = stages_.find(run_id); stage != stages_.end()) return &stage->second.run;
  Entry entry;
  {
    MutexLock lock(&mu_);
    auto it = view_.find(run_id);
    if (it == view_.end()) return nullptr;
    entry = it->second;
  }
  Stage& stage = stages_[std::string(run_id)];
  stage.run = *entry.run;
  stage.expected = entry.revision;
  stage.lease = entry.lease;
  stage.buckets = entry.buckets;
  stage.base = std::move(entry.run);
  return &stage.run;
}

absl::Status EtcdRunStateBackend::CheckRunFits(int64_t nodes, absl::string_view node_id,
                                               absl::string_view address) const {
  return CheckRunFitsRequest(nodes, node_id, address, options_.max_request_bytes);
}

absl::StatusOr<Revision> EtcdRunStateBackend::Commit(absl::string_view run_id) {
  ReleaseRetired();
  auto it = stages_.find(run_id);
  if (it == stages_.end()) {
    return absl::NotFoundError(absl::StrCat("no run '", run_id, "' to commit"));
  }
  Stage stage = std::move(it->second);
  stages_.erase(it);
  absl::StatusOr<Revision> written =
      GuardedWrite("commit", std::string(run_id), stage.expected,
                   std::make_shared<const RunRecord>(std::move(stage.run)), stage.lease,
                   stage.base.get(), stage.buckets);
  if (!written.ok()) {
    // Nothing of the event is sent: the round state machine reports the failure and the service
    // steps down; the agents rejoin a leader that reads the runs afresh (docs/ETCD.md, Replicas).
    spdlog::warn("{}; the change to run '{}' is not written",
                 std::string(written.status().message()), std::string(run_id));
  }
  return written;
}

absl::Status EtcdRunStateBackend::Delete(absl::string_view run_id) {
  ReleaseRetired();
  const bool staged = DropStage(run_id);
  const std::string id(run_id);
  const std::string key = KeyOf(run_id);
  // Unconditional, as the interface asks: repeating a delete whose answer was lost deletes
  // nothing more, so it is sent again (bounded) until one answer comes.
  const absl::Time deadline = absl::Now() + options_.decide_timeout;
  bool lost_answer = false;
  std::vector<etcd::Compare> compares;
  std::vector<etcd::Op> otherwise;
  const int64_t fence = fence_.term();
  if (absl::Status fenced = fence_.Guard(fence, compares, otherwise); !fenced.ok()) {
    return absl::Status(fenced.code(), absl::StrCat("etcd backend: delete of run '", run_id,
                                                    "' (key ", key, "): ", fenced.message()));
  }
  while (true) {
    absl::StatusOr<etcd::TxnResult> txn = client_->Txn(
        compares, {etcd::Op::Delete(key), etcd::Op::DeletePrefix(key + kNodeBucketSeparator)},
        otherwise);
    if (txn.ok() && !txn->succeeded) {
      absl::Status fenced = fence_.Check(fence, *txn, 0);
      return absl::Status(fenced.code(), absl::StrCat("etcd backend: delete of run '", run_id,
                                                      "' (key ", key, "): ", fenced.message()));
    }
    if (txn.ok()) {
      const int64_t deleted = txn->results.empty() ? 0 : txn->results[0].count;
      if (deleted > 0 || lost_answer) {
        ApplyLocal(id, nullptr, txn->revision, kNoLease, 0);
        if (lost_answer) {
          MutexLock lock(&mu_);
          ++decided_;
        }
        return absl::OkStatus();
      }
      {
        MutexLock lock(&mu_);
        auto v = view_.find(id);
        if (v != view_.end()) {
          retired_.push_back(std::move(v->second.run));
          view_.erase(v);
        }
      }
      if (staged) return absl::OkStatus();
      return absl::NotFoundError(absl::StrCat("no run '", run_id, "'"));
    }
    if (txn.status().code() != absl::StatusCode::kDeadlineExceeded || absl::Now() >= deadline) {
      return absl::Status(txn.status().code(),
                          absl::StrCat("etcd backend: delete of run '", run_id, "' (key ", key,
                                       "): ", txn.status().message()));
    }
    lost_answer = true;
  }
}

absl::StatusOr<Revision> EtcdRunStateBackend::CompareAndPut(const RunRecord& run, Revision expected,
                                                            LeaseId lease) {
  ReleaseRetired();
  DropStage(run.run_id);
  if (absl::StrContains(run.run_id, kNodeBucketSeparator)) {
    return absl::InvalidArgumentError(
        absl::StrCat("run id '", absl::CHexEscape(run.run_id),
                     "' has the byte 0x1f, which the etcd backend's keys reserve"));
  }
  // The buckets already in etcd: those of the record this replica knows at `expected` (a write
  // at another revision fails its compare anyway). Every bucket is written (or deleted): the
  // stored nodes are not known to be those of `run`.
  int buckets = 0;
  {
    MutexLock lock(&mu_);
    auto it = view_.find(run.run_id);
    if (it != view_.end() && it->second.revision == expected) buckets = it->second.buckets;
  }
  return GuardedWrite("compare-and-put", run.run_id, expected,
                      std::make_shared<const RunRecord>(run), lease, nullptr, buckets);
}

absl::Status EtcdRunStateBackend::CompareAndDelete(absl::string_view run_id, Revision expected) {
  ReleaseRetired();
  DropStage(run_id);
  return GuardedWrite("compare-and-delete", std::string(run_id), expected, nullptr, kNoLease,
                      nullptr, 0)
      .status();
}

absl::StatusOr<Revision> EtcdRunStateBackend::GuardedWrite(
    absl::string_view what, const std::string& run_id, Revision expected,
    const std::shared_ptr<const RunRecord>& run, LeaseId lease, const RunRecord* base,
    int buckets) {
  const std::string writer = NextWriter();
  if (run == nullptr) {
    return GuardedWriteTxn(what, run_id, writer, expected, nullptr, lease, base, buckets);
  }
  {
    MutexLock lock(&mu_);
    in_flight_[run_id] = InFlight{writer, run};
  }
  absl::StatusOr<Revision> written =
      GuardedWriteTxn(what, run_id, writer, expected, run, lease, base, buckets);
  MutexLock lock(&mu_);
  in_flight_.erase(run_id);
  return written;
}

absl::StatusOr<Revision> EtcdRunStateBackend::GuardedWriteTxn(
    absl::string_view what, const std::string& run_id, const std::string& writer, Revision expected,
    std::shared_ptr<const RunRecord> run, LeaseId lease, const RunRecord* base, int buckets) {
  const std::string key = KeyOf(run_id);
  const std::string bucket_prefix = key + kNodeBucketSeparator;
  std::vector<etcd::Compare> compares = {etcd::Compare::ModRevisionIs(key, expected)};
  std::vector<etcd::Op> then;
  if (run == nullptr) {
    then = {etcd::Op::Delete(key), etcd::Op::DeletePrefix(bucket_prefix)};
  } else {
    // The run key, and the node buckets that changed since `base` (every bucket without one).
    if (buckets <= 0) buckets = NodeBuckets(run->max_nodes);
    std::vector<bool> dirty(buckets, base == nullptr);
    if (base != nullptr) MarkChangedBuckets(base->nodes, run->nodes, buckets, &dirty);
    std::vector<std::vector<const NodeRecord*>> nodes(buckets);
    for (const auto& [id, node] : run->nodes) {
      const int b = NodeBucket(id, buckets);
      if (dirty[b]) nodes[b].push_back(&node);
    }
    then.push_back(etcd::Op::Put(key, EncodeRunRecord(*run, writer, buckets), lease));
    for (int b = 0; b < buckets; ++b) {
      if (!dirty[b]) continue;
      std::string bucket_key = absl::StrCat(bucket_prefix, b);
      then.push_back(nodes[b].empty()
                         ? etcd::Op::Delete(std::move(bucket_key))
                         : etcd::Op::Put(std::move(bucket_key), EncodeNodeBucket(nodes[b]), lease));
    }
  }
  // The run key and its buckets; the fence (if any) reads the leader key third.
  std::vector<etcd::Op> otherwise = {etcd::Op::Get(key), etcd::Op::GetPrefix(bucket_prefix)};
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("etcd backend: ", what, " of run '", run_id,
                                               "' (key ", key, "): ", s.message()));
  };
  // etcd answers a larger request with "request is too large": say so before sending it.
  if (const int64_t bytes = TxnBytes(compares, then, otherwise);
      bytes > options_.max_request_bytes) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "the write needs ", bytes, " bytes in one etcd Txn, more than --etcd-max-request-bytes (",
        options_.max_request_bytes, ", as etcd's --max-request-bytes)")));
  }
  const int64_t fence = fence_.term();
  if (absl::Status fenced = fence_.Guard(fence, compares, otherwise); !fenced.ok()) {
    return fail(fenced);
  }

  const absl::Time deadline = absl::Now() + options_.decide_timeout;
  bool lost_answer = false;
  while (true) {
    absl::StatusOr<etcd::TxnResult> txn = client_->Txn(compares, then, otherwise);
    if (run != nullptr && options_.after_put_txn_for_test) options_.after_put_txn_for_test();
    if (!txn.ok()) {
      const absl::StatusCode code = txn.status().code();
      if (code == absl::StatusCode::kNotFound && lease != kNoLease) {
        return absl::NotFoundError(LeaseGone(lease));
      }
      // The answer was lost (or, after a lost answer, no member answered): decide by sending
      // the guarded Txn again, until decide_timeout.
      const bool undecided = code == absl::StatusCode::kDeadlineExceeded ||
                             (lost_answer && code == absl::StatusCode::kUnavailable);
      if (undecided && absl::Now() < deadline) {
        lost_answer = true;
        continue;
      }
      if (lost_answer) {
        return absl::UnavailableError(
            absl::StrCat(fail(txn.status()).message(),
                         "; the write's outcome is unknown (it may have been "
                         "applied) after ",
                         absl::FormatDuration(options_.decide_timeout)));
      }
      return fail(txn.status());
    }
    if (lost_answer) {
      MutexLock lock(&mu_);
      ++decided_;
    }
    if (txn->succeeded) {
      ApplyLocal(run_id, std::move(run), txn->revision, lease, buckets);
      return txn->revision;
    }
    const etcd::KeyValue* current =
        !txn->results.empty() && !txn->results[0].kvs.empty() ? &txn->results[0].kvs[0] : nullptr;
    if (lost_answer) {
      // Ours, applied by the attempt whose answer was lost?
      if (run != nullptr && current != nullptr) {
        std::string current_writer;
        absl::StatusOr<RunRecord> there = DecodeRunRecord(current->value, &current_writer);
        if (there.ok() && current_writer == writer) {
          ApplyLocal(run_id, std::move(run), current->mod_revision, lease, buckets);
          return current->mod_revision;
        }
      }
      // A delete whose key is gone: the outcome asked for holds (ours or another's delete).
      if (run == nullptr && current == nullptr) {
        ApplyLocal(run_id, nullptr, txn->revision, kNoLease, 0);
        return txn->revision;
      }
    }
    std::vector<const etcd::KeyValue*> current_buckets;
    if (txn->results.size() > 1) {
      for (const etcd::KeyValue& kv : txn->results[1].kvs) current_buckets.push_back(&kv);
    }
    if (absl::Status fenced = fence_.Check(fence, *txn, 2); !fenced.ok()) {
      MutexLock lock(&mu_);
      ApplyRead(run_id, current, current_buckets, txn->revision);
      return fail(fenced);
    }
    {
      MutexLock lock(&mu_);
      ApplyRead(run_id, current, current_buckets, txn->revision);
    }
    if (run == nullptr && current == nullptr) {
      return absl::NotFoundError(absl::StrCat("no run '", run_id, "'"));
    }
    return absl::AbortedError(absl::StrCat("run '", run_id, "' is at revision ",
                                           current == nullptr ? 0 : current->mod_revision,
                                           ", expected ", expected));
  }
}

absl::StatusOr<RunRecord> EtcdRunStateBackend::ReadRun(etcd::Client& client,
                                                       absl::string_view prefix,
                                                       absl::string_view run_id) {
  const std::string key = absl::StrCat(prefix, run_id);
  absl::StatusOr<etcd::TxnResult> txn =
      client.Txn({}, {etcd::Op::Get(key), etcd::Op::GetPrefix(key + kNodeBucketSeparator)});
  if (!txn.ok()) return txn.status();
  if (txn->results.size() != 2 || txn->results[0].kvs.empty()) {
    return absl::NotFoundError(absl::StrCat("no run key ", key));
  }
  absl::StatusOr<RunRecord> run = DecodeRunRecord(txn->results[0].kvs[0].value);
  if (!run.ok()) return run.status();
  for (const etcd::KeyValue& kv : txn->results[1].kvs) {
    absl::StatusOr<std::vector<NodeRecord>> nodes = DecodeNodeBucket(kv.value);
    if (!nodes.ok()) return nodes.status();
    for (NodeRecord& n : *nodes) {
      std::string id = n.node_id;
      run->nodes.insert_or_assign(std::move(id), std::move(n));
    }
  }
  return run;
}

absl::StatusOr<LeaseId> EtcdRunStateBackend::GrantLease(absl::Duration ttl, absl::Time /*now*/) {
  ReleaseRetired();
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl must be > 0, got ", absl::FormatDuration(ttl)));
  }
  const auto seconds = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(ttl)));
  absl::StatusOr<etcd::Lease> lease = client_->LeaseGrant(seconds);
  if (!lease.ok()) {
    return absl::Status(lease.status().code(),
                        absl::StrCat("etcd backend: granting a lease: ", lease.status().message()));
  }
  return lease->id;
}

absl::Status EtcdRunStateBackend::KeepAlive(LeaseId lease, absl::Time /*now*/) {
  absl::StatusOr<int64_t> ttl = client_->LeaseKeepAliveOnce(lease);
  if (ttl.ok()) return absl::OkStatus();
  if (ttl.status().code() == absl::StatusCode::kNotFound)
    return absl::NotFoundError(LeaseGone(lease));
  return absl::Status(ttl.status().code(), absl::StrCat("etcd backend: keepalive of lease ", lease,
                                                        ": ", ttl.status().message()));
}

absl::Status EtcdRunStateBackend::RevokeLease(LeaseId lease) {
  ReleaseRetired();
  absl::Status revoked = client_->LeaseRevoke(lease);
  if (revoked.code() == absl::StatusCode::kNotFound) return absl::NotFoundError(LeaseGone(lease));
  if (!revoked.ok()) {
    return absl::Status(revoked.code(), absl::StrCat("etcd backend: revoking lease ", lease, ": ",
                                                     revoked.message()));
  }
  // etcd deleted the lease's keys; the watch brings the deletes (and tells the watchers). Drop
  // them from the view now so that this replica's reads agree at once; the watch's older events
  // of those runs are not applied.
  MutexLock lock(&mu_);
  for (auto it = view_.begin(); it != view_.end();) {
    if (it->second.lease == lease) {
      Revision& floor = floors_[it->first];
      floor = std::max(floor, it->second.revision);
      retired_.push_back(std::move(it->second.run));
      it = view_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

void EtcdRunStateBackend::ExpireLeases(absl::Time /*now*/) {}

}  // namespace dgt::rendezvous
