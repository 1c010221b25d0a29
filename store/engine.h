// The key-value engine behind dgt's store: keys, values, counters, queues and waiters, with the
// semantics of PyTorch's TCPStore (torch 1.13 and 2.x servers). Transport-free, so the wire
// server and unit tests drive it directly.
//
// Thread-compatible, not thread-safe: the wire server calls it from its single I/O thread.
#ifndef DGT_STORE_ENGINE_H_
#define DGT_STORE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt::store {

class Engine {
 public:
  using WaitId = uint64_t;
  using WaitCallback = std::function<void()>;

  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Every mutation of a key's value (Set, Add, CompareSet that stores, Append) wakes the waits
  // registered on that key, as torch 2.x's libuv server does: WAITs (registered only while the
  // key is missing) and BARRIERs (registered while the count is short).

  // Stores `value` under `key`, replacing any value. Wakes waiters on `key`.
  void Set(absl::string_view key, absl::string_view value);

  // The value under `key`, or nullptr when it is missing. The pointer is valid until the next
  // mutating call.
  const std::string* Get(absl::string_view key) const;

  // Adds `delta` to the integer stored as ASCII decimal under `key` (missing counts as 0), stores
  // the sum as ASCII decimal and returns it, as torch TCPStore ADD.
  // Errors: InvalidArgument when the stored value is not a decimal i64.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);

  // As torch TCPStore COMPARE_SET: missing key and empty `expected` → stores `desired`; missing
  // key and non-empty `expected` → stores nothing and returns `expected`; present key → replaces
  // the value only when it equals `expected`. Returns the value now current (or `expected`): a
  // view into the engine (valid until the next mutating call) or into `expected`.
  absl::string_view CompareSet(absl::string_view key, absl::string_view expected,
                               absl::string_view desired);

  // Appends `value` to the value under `key` (creating it), as torch 2.x APPEND.
  void Append(absl::string_view key, absl::string_view value);

  // True when every key is present (a value, or a non-empty queue), as torch CHECK.
  bool Check(const std::vector<std::string>& keys) const;

  // Number of keys holding a value (torch GETNUMKEYS; queues are not counted).
  int64_t NumKeys() const;

  // Every key holding a value, sorted (LIST_KEYS; queues are not listed).
  std::vector<std::string> ListKeys() const;

  // Removes `key`; returns true when it existed (torch DELETE_KEY answers 1 or 0).
  bool Delete(absl::string_view key);

  // Queue operations of torch 2.x (QUEUE_PUSH, QUEUE_POP, QUEUE_LEN). A push wakes ONE wait on
  // `key` (the oldest whose last missing key it was), as torch 2.13's server does, so that of
  // several blocked `queue_pop` callers only one is answered per item; a pop of an empty or
  // missing queue returns nullopt.
  void QueuePush(absl::string_view key, absl::string_view value);
  std::optional<std::string> QueuePop(absl::string_view key);
  int64_t QueueLen(absl::string_view key) const;

  // Registers `callback` to run once every key of `keys` is present. Returns nullopt and does not
  // register (nor call) anything when all keys are already present. The callback runs inside
  // the mutating call that made the last key present.
  std::optional<WaitId> Wait(const std::vector<std::string>& keys, WaitCallback callback);

  // torch 2.x BARRIER: adds 1 to the decimal counter under `key` (missing counts as 0). When the
  // count reaches `world_size`, wakes every wait on `key` and returns nullopt without
  // registering `callback`; otherwise registers `callback` as a wait on `key` that the next
  // mutation of `key` fires (the barrier's completion by another caller, or a Set/Add/...), and
  // returns its id for CancelWait.
  // Errors: InvalidArgument when the stored value is not a decimal i64 (nothing is changed).
  absl::StatusOr<std::optional<WaitId>> Barrier(absl::string_view key, int64_t world_size,
                                                WaitCallback callback);

  // Drops a registered wait; returns false when it already fired or never existed. Leaves no
  // state behind for the wait's keys.
  bool CancelWait(WaitId id);

  // Registered, not yet fired waits (for tests and metrics).
  size_t PendingWaits() const { return waits_.size(); }

 private:
  struct PendingWait {
    std::vector<std::string> missing_keys;
    size_t remaining = 0;
    WaitCallback callback;
  };

  bool Present(absl::string_view key) const;
  // Fires the waits on `key` that it completes: all of them, or only the first when
  // `only_one` (a queue push).
  void WakeWaiters(absl::string_view key, bool only_one = false);
  WaitId Register(std::vector<std::string> missing_keys, WaitCallback callback);

  absl::flat_hash_map<std::string, std::string> values_;
  absl::flat_hash_map<std::string, std::deque<std::string>> queues_;
  absl::flat_hash_map<WaitId, PendingWait> waits_;
  // Key → waits that still miss it, one entry per missing occurrence.
  absl::flat_hash_map<std::string, std::vector<WaitId>> waiters_by_key_;
  WaitId next_wait_id_ = 1;
};

}  // namespace dgt::store

#endif  // DGT_STORE_ENGINE_H_
