// dgt::etcd::Client — an etcd v3 client over gRPC (the KV, Lease, Watch and Maintenance services of
// etcd's rpc.proto, generated at build time from Debian's golang-etcd-server-dev), for the
// rendezvous' etcd run-state backend (docs/ETCD.md). Keys and values are bytes.
//
// Endpoints and failover: the client holds one channel per endpoint and sends each call to its
// current endpoint; when that attempt fails with UNAVAILABLE (member down, no leader, leader
// changed) it moves to the next endpoint and tries again, pausing between full passes over the
// endpoints (ClientOptions::backoff), until the call's deadline. Reads (Range, LeaseTimeToLive)
// also move on when one attempt runs past ClientOptions::attempt_timeout. A lease renewal
// (LeaseKeepAliveOnce) does not wait that long on one member: a member that holds it (a paused
// leader) is joined by the next member after a share of the call's budget, and the first answer
// wins. Writes (Put, DeleteRange, Txn, LeaseGrant, LeaseRevoke) are not
// repeated after an attempt timed out (the member may have applied it): they return
// DEADLINE_EXCEEDED naming the endpoint, and the next call starts on the next member. That happens
// when the leader dies: a member that has not yet noticed forwards the write to the dead leader and
// never answers it (etcd's Go client sees the same). A write repeated after an UNAVAILABLE that
// came after sending (a member killed mid-call) may have been applied twice. So a Txn guards its
// effect with its own compare, and its caller, on DEADLINE_EXCEEDED or a failed compare after a
// retry, reads back whether its write is there. Every call carries etcd's "hasleader" metadata: a
// member that knows of no leader (an election, a partition) answers UNAVAILABLE at once and the
// call moves on.
//
// Errors (absl::Status): every call is bounded by ClientOptions::call_timeout; when it passes with
// only UNAVAILABLE answers the call returns UNAVAILABLE naming each endpoint tried and its last
// error ("etcd put: no member answered within 2s (127.0.0.1:2379: failed to connect to all
// addresses; ...)"). Errors etcd
// itself returns keep their gRPC code (e.g. NOT_FOUND for an unknown lease, INVALID_ARGUMENT for
// an empty key, OUT_OF_RANGE for a compacted revision).
//
// Thread-safety: thread-safe; calls from several threads run concurrently.
#ifndef DGT_ETCD_CLIENT_H_
#define DGT_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt::etcd {

struct ClientOptions {
  // "host:port" of each member's client URL (plain http, as etcd's --listen-client-urls
  // http://...). At least one.
  std::vector<std::string> endpoints;
  // Deadline of each call, all attempts on all endpoints together.
  absl::Duration call_timeout = absl::Seconds(5);
  // Deadline of one attempt on one endpoint (at most what is left of call_timeout).
  absl::Duration attempt_timeout = absl::Seconds(2);
  // How long one attempt waits for a member's connection to be (re)established before moving
  // on to the next member: what a member that is down costs a call (at most what is left of
  // call_timeout).
  absl::Duration connect_timeout = absl::Milliseconds(500);
  // Pause after each full pass over the endpoints that met only UNAVAILABLE (doubled each pass up
  // to max_backoff); a Watch also pauses this long between reconnections.
  absl::Duration backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Milliseconds(500);
};

// One key as etcd stores it (mvccpb.KeyValue). Revisions are etcd's cluster-wide revisions.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the put that created the key (0: absent).
  int64_t mod_revision = 0;     // revision of the last put to the key.
  int64_t version = 0;          // puts since creation (1 after creation).
  int64_t lease = 0;            // lease id the key is attached to (0: none).
};

// What a Range read returns.
struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key, as etcd returns them.
  int64_t count = 0;          // keys in the range (may exceed kvs.size() with a limit).
  bool more = false;          // more keys than `limit` matched.
  int64_t revision = 0;       // the store's revision when read (header.revision).
};

// A condition of a Txn (etcdserverpb.Compare) on one key.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kModRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // kVersion, kCreateRevision, kModRevision.
  std::string value;   // kValue.

  // mod_revision(key) == revision (0 == absent): "nobody wrote the key since I read it".
  static Compare ModRevisionIs(std::string key, int64_t revision);
  // create_revision(key) == revision; 0 means "the key does not exist".
  static Compare CreateRevisionIs(std::string key, int64_t revision);
  static Compare ValueIs(std::string key, std::string value);
};

// An operation of a Txn branch (etcdserverpb.RequestOp).
struct Op {
  enum class Type { kGet, kGetPrefix, kPut, kDelete, kDeletePrefix };
  Type type = Type::kGet;
  std::string key;
  std::string value;  // kPut.
  int64_t lease = 0;  // kPut: attach the key to this lease (0: none).

  static Op Get(std::string key);
  static Op GetPrefix(std::string prefix);
  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Delete(std::string key);
  static Op DeletePrefix(std::string prefix);
};

struct TxnResult {
  bool succeeded = false;  // every compare held: `then` ran; else `otherwise` ran.
  int64_t revision = 0;    // the store's revision after the txn (header.revision).
  // One entry per op of the branch that ran, in order: filled for kGet/kGetPrefix (kvs, count),
  // `count` = keys deleted for kDelete/kDeletePrefix, empty for kPut.
  std::vector<RangeResult> results;
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // as granted (etcd may raise a very short TTL to its minimum).
};

// A change seen by a Watch (mvccpb.Event).
struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // kDelete: key and mod_revision (the deleting revision) only.
};

// What MemberStatus returns about one member (Maintenance.Status).
struct MemberStatus {
  uint64_t member_id = 0;
  uint64_t leader_id = 0;  // 0: the member knows of no leader.
  uint64_t raft_term = 0;
  int64_t revision = 0;
  std::string version;  // etcd's version, e.g. "3.4.23".
};

class LeaseKeeper;
class Watcher;

class Client {
 public:
  // Opens a channel to each endpoint (connections are made lazily, on first use). Errors:
  // INVALID_ARGUMENT for no endpoints, an empty endpoint or a non-positive timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The value of `key`, or NOT_FOUND naming the key.
  absl::StatusOr<KeyValue> Get(absl::string_view key);
  // Every key starting with `prefix` (sorted by key); limit 0 = no limit. An empty prefix is
  // INVALID_ARGUMENT (use a dgt key prefix, never the whole keyspace).
  absl::StatusOr<RangeResult> GetPrefix(absl::string_view prefix, int64_t limit = 0);
  // Sets key = value (attached to `lease` unless 0); returns the revision of the put.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value, int64_t lease = 0);
  // Deletes `key`; returns how many keys were deleted (0 or 1).
  absl::StatusOr<int64_t> Delete(absl::string_view key);
  // Deletes every key starting with `prefix` (non-empty); returns how many were deleted.
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix);
  // Atomically: if every compare holds run `then`, else `otherwise` (etcd Txn).
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& then,
                                const std::vector<Op>& otherwise = {});

  // Grants a lease of `ttl` seconds (> 0). Keys put with it are deleted when it expires.
  absl::StatusOr<Lease> LeaseGrant(int64_t ttl_seconds);
  // Renews `lease_id` once (one request and its answer on a LeaseKeepAlive stream, bounded by the
  // call deadline); returns the TTL it now has, in seconds. NOT_FOUND when it expired or was
  // revoked. When a member has not answered within half the call's budget divided by the number
  // of members, the request goes to the next member too (the earlier ones still waiting), so a
  // member that hangs costs a share of the budget, not all of it.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease_id);
  // The same, given up (UNAVAILABLE or DEADLINE_EXCEEDED) at `until` when that comes before the
  // call deadline: a LeaseKeeper does not wait past the lease's TTL for one renewal.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease_id, absl::Time until);
  // Seconds left on `lease_id`; NOT_FOUND when it expired or was revoked.
  absl::StatusOr<int64_t> LeaseTimeToLive(int64_t lease_id);
  // Revokes `lease_id`, deleting its keys. NOT_FOUND when it had already expired or been revoked.
  absl::Status LeaseRevoke(int64_t lease_id);

  // Status of the member at `endpoint` (one of options().endpoints), asked of that member only
  // (no failover): UNAVAILABLE when it is down.
  absl::StatusOr<MemberStatus> GetMemberStatus(absl::string_view endpoint);

  // Watches `key` (or every key starting with it when `prefix`) from `start_revision` (0: from
  // now; a past revision replays history from there). `on_events` gets each batch in revision
  // order, on the watch's own thread (it must not destroy the Watcher). When the stream breaks
  // (member killed, member lost the leader) the watch reconnects, to the next endpoint, and
  // resumes from the revision after the last event delivered: no event is lost or repeated.
  // `on_error` (may be empty) is called once with a terminal error, after which the watch stops:
  // OUT_OF_RANGE when the revision to resume from was compacted. Destroying the Watcher cancels it
  // and joins its thread; after that no callback runs. Errors here: INVALID_ARGUMENT for an empty
  // key.
  absl::StatusOr<std::unique_ptr<Watcher>> Watch(
      std::string key, bool prefix, int64_t start_revision,
      std::function<void(const std::vector<Event>&)> on_events,
      std::function<void(const absl::Status&)> on_error = {});

  // Keeps `lease_id` (granted with `ttl_seconds`) alive from a thread of its own: renews it every
  // ttl/3 (LeaseKeepAliveOnce, each bounded by call_timeout and by the TTL since the last
  // successful renewal), retrying failed renewals until that TTL has passed, so a loss is
  // reported at most about a TTL after the last renewal however long etcd takes to not answer. The
  // lease is lost (status() and `on_lost`, called once on the keeper's thread) with NOT_FOUND when
  // etcd says it expired or was revoked, and with DEADLINE_EXCEEDED when no renewal succeeded
  // within the TTL (etcd unreachable: the lease may have expired there). Destroying the keeper
  // stops renewing (it does not revoke). Errors here: INVALID_ARGUMENT for ttl_seconds <= 0.
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> KeepAlive(
      int64_t lease_id, int64_t ttl_seconds, std::function<void(const absl::Status&)> on_lost = {});

  const ClientOptions& options() const;

  class Impl;  // Defined in client.cc.

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// A lease kept alive (Client::KeepAlive). The client may be destroyed before it. Thread-safe.
class LeaseKeeper {
 public:
  // Stops renewing and joins the keeper's thread: returns within the client's call_timeout (a
  // renewal in flight finishes first).
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // OK while the lease is kept; the loss (see Client::KeepAlive) once lost.
  absl::Status status() const;
  // Successful renewals so far.
  int64_t renewals() const;

  class Impl;

 private:
  friend class Client;
  explicit LeaseKeeper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A running watch (Client::Watch). The client may be destroyed before it. Thread-safe.
class Watcher {
 public:
  // Cancels the stream and joins the watch's thread: returns within connect_timeout (a
  // reconnection in progress finishes waiting first) once any on_events call returns.
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // The revision the watch resumes from after a reconnection (last delivered event's + 1).
  int64_t next_revision() const;
  // Streams opened so far (1 + reconnections).
  int streams_opened() const;

  class Impl;

 private:
  friend class Client;
  explicit Watcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgt::etcd

#endif  // DGT_ETCD_CLIENT_H_
