// EtcdRunStateBackend: the rendezvous' run state (rendezvous/run_state_backend.h) kept in etcd v3,
// so that several dgt-rendezvous replicas can share it (docs/ETCD.md, "The run-state
// backend"). It stands on dgt::etcd::Client (etcd/client.h) and is the only part of the
// rendezvous that links it (dgt::rendezvous_etcd).
//
// Keys and values (record version 2, rendezvous/run_record_codec.h), per run:
// - a run key `<prefix><run_id>` (default prefix "/dgt/runs/"). Its value is the RunRecord
//   without its nodes as JSON: {"version": 2, "writer": "<replica id>:<write>", "buckets": B,
//   "run": {...}} (times as Unix nanoseconds, durations as nanoseconds, infinite ones as
//   "inf"/"-inf").
// - the nodes, in B bucket keys `<prefix><run_id>\x1f<k>` (NodeBucket: FNV-1a of the node id
//   modulo B; B = NodeBuckets(max_nodes), one per 32 nodes, 1..100, fixed at creation).
// So a join writes the run key and one bucket, not the whole run (O(N^2) bytes per round). A
// 10,000-node run fits etcd's 1.5 MiB request and 128-op Txn limits. "writer" names the write
// uniquely, so that a write whose answer was lost can be recognised when read back. A value of
// another version, or one that does not parse, is skipped with a warning (the run is invisible to
// this replica) and a write over it is refused (compare fails).
//
// How each call maps to etcd:
// - Revision: the run key's mod_revision (etcd's cluster-wide revision of the run's last write;
//   every write puts the run key).
// - Find, RevisionOf, ForEach, size: served from a local view (plus this replica's stages). The
//   view is loaded by one Range of the prefix at Open and kept current by one Watch of the prefix
//   from the revision after that read, and by this replica's own writes (so a reader sees its
//   own write at once; the watch's later copy of it is not applied twice, nor is an older event).
// - Create, Mutable: stage a copy (with the revision it was read at) for the caller to change.
// - Commit, CompareAndPut: one Txn: if mod_revision(run key) == revision read (0: absent), put
//   the run key and the node buckets that changed since the record was read (Commit; every
//   bucket for CompareAndPut), a bucket left empty deleted, all with the lease; else get the run
//   key and its buckets. A failed compare is Aborted ("run 'x' is at revision N, expected M") and
//   updates the view with what was read. Costs O(nodes) CPU per commit (the stage is a copy,
//   compared node by node with the record read) and O(nodes / B) bytes per changed bucket. When
//   the watch delivers a put of this replica's before its Txn answers (as etcd often does), the
//   view takes the record written, recognised by its "writer", without decoding it back.
// - Delete: one Txn deleting the run key and its buckets; CompareAndDelete: the same Txn
//   comparing the run key's mod_revision first.
// - GrantLease, KeepAlive, RevokeLease: LeaseGrant (ttl rounded up to whole seconds; etcd may
//   raise a TTL below its minimum), LeaseKeepAliveOnce, LeaseRevoke. etcd deletes a lease's keys
//   when it ends, on the etcd leader's clock: `now` is ignored, ExpireLeases does nothing, and the
//   deletes reach the view (and the watchers) through the watch. RevokeLease also drops the
//   lease's runs from the view at once.
// - Watch: callbacks called on the etcd watch's thread, in revision order, after the view holds
//   the change, for every change (this replica's and others') with a revision above the highest
//   this replica knew of when Watch was called. When the etcd watch ends for good (OUT_OF_RANGE:
//   the revision to resume from was compacted while it was disconnected), the next write first
//   re-reads the prefix into the view, tells the watchers of each run that changed (a put at its
//   revision) or went (a delete at the read's revision), and watches again.
//
// A write's answer lost (DEADLINE_EXCEEDED: the member forwarded it to a leader that died, and
// it may or may not have been applied) is never repeated blindly. The backend decides by sending
// the same guarded Txn again with a read of the key in its else branch: the compare makes a second
// application impossible (the first, if applied, moved mod_revision), and the read tells whether
// the value there is this write's (its "writer" id): applied, at that revision; or another
// writer's: Aborted. That is repeated, bounded by Options::decide_timeout; when no member answers
// within it the write fails UNAVAILABLE, saying that it may have been applied. Errors from etcd
// (UNAVAILABLE naming each endpoint and its last error, from the client) are returned with the
// run and key prefixed ("etcd backend: commit of run 'job' (key /dgt/runs/job): etcd txn: no
// member answered within 5s (127.0.0.1:2379: ...)").
//
// Code: the view (Open, Find, ForEach, Watch, the watch's events, Reload) is
// etcd_run_state_view.cc; the stages and the fenced writes (Commit, Delete, CompareAndPut, the
// leases) are etcd_run_state_backend.cc.
//
// Thread-compatible as RunStateBackend says (the caller serialises its calls); the watch thread
// updates the view under a mutex of its own. A pointer from Find stays valid until the caller's
// next write (records the watch replaced are kept until then).
#ifndef DGT_RENDEZVOUS_ETCD_RUN_STATE_BACKEND_H_
#define DGT_RENDEZVOUS_ETCD_RUN_STATE_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "etcd/client.h"
#include "etcd/fence.h"
#include "rendezvous/run_record_codec.h"
#include "rendezvous/run_state_backend.h"

namespace dgt::rendezvous {

class EtcdRunStateBackend final : public RunStateBackend {
 public:
  struct Options {
    // The etcd client's endpoints and timeouts (etcd/client.h).
    etcd::ClientOptions client;
    // Key prefix of the runs; must be non-empty (never the whole keyspace).
    std::string prefix = "/dgt/runs/";
    // How long a write whose answer was lost keeps trying to learn its outcome.
    absl::Duration decide_timeout = absl::Seconds(10);
    // The replicas' leader key (etcd/leader_election.h), or empty: no fence. When set, every
    // write is guarded by an etcd::LeaderFence (etcd/fence.h) at the term SetLeaderFence gave,
    // so that a replica deposed since it won can never commit; until SetLeaderFence gives a
    // revision every write is refused.
    std::string leader_key;
    // The most bytes one Txn may send: etcd's --max-request-bytes (its default, 1.5 MiB), which
    // etcd's members must be started with too. A run that would need more is refused at its
    // first join (CheckRunFits), and a write over it fails with ResourceExhausted before it is
    // sent.
    int64_t max_request_bytes = kEtcdDefaultMaxRequestBytes;
    // Tests only: called after each put's Txn answered and before the view takes the write, so
    // that a test can let the watch deliver the write first (own_writes_from_watch).
    std::function<void()> after_put_txn_for_test;
  };

  // Connects, reads every run under the prefix and starts watching it. Errors: InvalidArgument
  // for an empty prefix or bad client options; UNAVAILABLE naming the endpoints when no member
  // answers within the client's call_timeout.
  static absl::StatusOr<std::unique_ptr<EtcdRunStateBackend>> Open(Options options);

  ~EtcdRunStateBackend() override;
  EtcdRunStateBackend(const EtcdRunStateBackend&) = delete;
  EtcdRunStateBackend& operator=(const EtcdRunStateBackend&) = delete;

  const RunRecord* Find(absl::string_view run_id) const override;
  Revision RevisionOf(absl::string_view run_id) const override;
  void ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const override;
  size_t size() const override;

  absl::StatusOr<RunRecord*> Create(absl::string_view run_id) override;
  RunRecord* Mutable(absl::string_view run_id) override;
  absl::StatusOr<Revision> Commit(absl::string_view run_id) override;
  absl::Status Delete(absl::string_view run_id) override;

  absl::StatusOr<Revision> CompareAndPut(const RunRecord& run, Revision expected,
                                         LeaseId lease = kNoLease) override;
  absl::Status CompareAndDelete(absl::string_view run_id, Revision expected) override;

  absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl, absl::Time now) override;
  absl::Status KeepAlive(LeaseId lease, absl::Time now) override;
  absl::Status RevokeLease(LeaseId lease) override;
  void ExpireLeases(absl::Time now) override;

  WatchId Watch(std::function<void(const RunEvent&)> fn) override;
  void CancelWatch(WatchId id) override;

  void DiscardStages() override { stages_.clear(); }
  // Re-reads the prefix (Range), tells the watchers of what changed, and watches again from
  // after that read.
  absl::Status Reload() override;
  // As CheckRunFitsRequest (run_record_codec.h) with max_request_bytes.
  absl::Status CheckRunFits(int64_t nodes, absl::string_view node_id,
                            absl::string_view address) const override;

  // The create_revision of the leader key this replica holds (its term), or 0 when it holds none
  // (every write is then refused with FAILED_PRECONDITION). Thread-safe: the election's thread
  // sets it while a write may be in flight (the write uses the value it read when it started).
  // Only with Options::leader_key. A write the fence refused fails FAILED_PRECONDITION
  // "fenced: ..." naming the key and both revisions.
  void SetLeaderFence(int64_t create_revision) { fence_.set_term(create_revision); }

  // The run `run_id` as stored under `prefix` (its run key and node buckets, read in one Txn),
  // for tools and tests that read etcd without a backend. Errors: NotFound when the run key is
  // absent; the decode's errors; the client's.
  static absl::StatusOr<RunRecord> ReadRun(etcd::Client& client, absl::string_view prefix,
                                           absl::string_view run_id);

  // The key of `run_id`.
  std::string KeyOf(absl::string_view run_id) const {
    return options_.prefix + std::string(run_id);
  }
  // Writes whose answer was lost and whose outcome was decided by reading back (for tests and
  // metrics).
  int64_t decided_after_lost_answer() const;
  // Whether the watch has ended for good (OUT_OF_RANGE: its resume revision was compacted while
  // it was disconnected), until the next write re-reads the prefix and watches again.
  bool watch_ended() const { return watch_ended_.load(); }
  // Times the view was re-read after the watch ended.
  int64_t resyncs() const;
  // This replica's own puts that the watch delivered before their Txn answered, taken into the
  // view as the record written (not decoded back from etcd).
  int64_t own_writes_from_watch() const;

 private:
  struct Entry {
    std::shared_ptr<const RunRecord> run;
    Revision revision = 0;
    LeaseId lease = kNoLease;
    int buckets = 0;  // Node buckets in etcd.
  };
  struct Stage {
    RunRecord run;
    Revision expected = 0;  // 0: a new run.
    LeaseId lease = kNoLease;
    int buckets = 0;                        // 0: a new run (NodeBuckets(max_nodes) at Commit).
    std::shared_ptr<const RunRecord> base;  // The record read: Commit writes the buckets changed.
  };
  // A put of this replica's between its Txn's send and the view taking it: its writer id and
  // the record written.
  struct InFlight {
    std::string writer;
    std::shared_ptr<const RunRecord> run;
  };
  struct WatchEntry {
    std::function<void(const RunEvent&)> fn;
    Revision after = 0;  // Only events with a higher revision.
  };

  explicit EtcdRunStateBackend(Options options);

  // The guarded put or delete of a run (compare the run key's mod_revision == expected; one Txn
  // putting the run key and the node buckets that differ from `base`, all of them when `base` is
  // null, or deleting the run key and its buckets when `run` is null), deciding a lost answer by
  // reading back. `buckets`: the run's bucket count in etcd (0: new, from max_nodes). Returns the
  // revision written; Aborted naming the current revision; NotFound for a delete of an absent
  // run. Updates the view.
  absl::StatusOr<Revision> GuardedWrite(absl::string_view what, const std::string& run_id,
                                        Revision expected,
                                        const std::shared_ptr<const RunRecord>& run, LeaseId lease,
                                        const RunRecord* base, int buckets);
  // GuardedWrite's Txn and its outcome, with the put (run non-null) registered in in_flight_
  // under `writer` by the caller.
  absl::StatusOr<Revision> GuardedWriteTxn(absl::string_view what, const std::string& run_id,
                                           const std::string& writer, Revision expected,
                                           std::shared_ptr<const RunRecord> run, LeaseId lease,
                                           const RunRecord* base, int buckets);
  // Applies a run read back (its run key, absent when `kv` is null, and its bucket keys) at
  // `read_revision` to the view.
  void ApplyRead(const std::string& run_id, const etcd::KeyValue* kv,
                 const std::vector<const etcd::KeyValue*>& buckets, Revision read_revision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts (run non-null) or removes a run in the view after this replica's own write at `revision`.
  void ApplyLocal(const std::string& run_id, std::shared_ptr<const RunRecord> run,
                  Revision revision, LeaseId lease, int buckets);
  // The watch thread's batch.
  void OnWatchEvents(const std::vector<etcd::Event>& events);
  // At the start of each write: drops records kept for pointers handed out before it, and
  // re-reads the prefix and watches again when the watch ended.
  void ReleaseRetired();
  // Re-reads every run under the prefix into the view (telling the watchers of each run that
  // changed or went) and starts a new watch after that read. Errors: the read's.
  absl::Status Resync();
  // Starts the watch of the prefix from `revision`.
  absl::Status StartWatch(Revision revision);
  // Drops this replica's stage of the run; whether there was one.
  bool DropStage(absl::string_view run_id);
  std::string NextWriter();

  Options options_;
  std::unique_ptr<etcd::Client> client_;
  std::string replica_id_;
  int64_t writes_ = 0;
  std::map<std::string, Stage, std::less<>> stages_;

  mutable Mutex mu_;
  std::map<std::string, Entry, std::less<>> view_ ABSL_GUARDED_BY(mu_);
  // Per run: the revision of this replica's latest write (or removal) not yet seen by the watch;
  // the watch applies only later events of that run.
  std::map<std::string, Revision, std::less<>> floors_ ABSL_GUARDED_BY(mu_);
  Revision known_revision_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<const RunRecord>> retired_ ABSL_GUARDED_BY(mu_);
  int64_t decided_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t resyncs_ ABSL_GUARDED_BY(mu_) = 0;
  // This replica's puts in flight, by run. etcd may deliver a write on the watch before the Txn
  // answers. The watch then takes the record written rather than decoding every bucket of the run
  // back and merging it into a copy of the view's nodes under mu_. That decoding takes tens of ms
  // at 10,000 nodes, while the writer waits for mu_ to apply its own answer.
  std::map<std::string, InFlight, std::less<>> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t own_writes_from_watch_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> watch_ended_{false};
  etcd::LeaderFence fence_;  // SetLeaderFence; off without Options::leader_key.

  Mutex watch_mu_;  // Held while callbacks run, so that CancelWatch waits for a delivery.
  std::map<WatchId, WatchEntry> watches_ ABSL_GUARDED_BY(watch_mu_);
  WatchId next_watch_ ABSL_GUARDED_BY(watch_mu_) = 1;

  std::unique_ptr<etcd::Watcher> watcher_;  // Last: stopped first.
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_ETCD_RUN_STATE_BACKEND_H_
