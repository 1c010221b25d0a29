// dgt::store::Store — the role every key-value store of dgt plays for its users: the TCPStore
// client (Client), the in-process store (MemoryStore) and the key-prefixing wrapper
// (PrefixStore). Semantics follow PyTorch's c10d Store / TCPStore (torch 1.13 and 2.x).
//
// Every call that may block takes a deadline: `Get`, `Wait` and `MultiGet` wait for keys up to
// the store's own timeout (or the timeout passed in), never forever.
//
// Thread-safety: implementations are thread-safe unless they say otherwise.
#ifndef DGT_STORE_STORE_H_
#define DGT_STORE_STORE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt::store {

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any value (torch SET).
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Waits until `key` exists, up to the store's timeout, then returns its value (torch `get`:
  // WAIT then GET). Errors: DeadlineExceeded when the key does not appear in time.
  virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;

  // Adds `delta` to the ASCII-decimal integer under `key` (missing counts as 0) and returns the
  // sum (torch ADD). Errors: InvalidArgument (in-process) or Unavailable (the wire server closes
  // the connection) when the value is not an integer.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // torch COMPARE_SET: key missing and `expected` empty → stores `desired`; key missing and
  // `expected` non-empty → stores nothing, returns `expected`; key present → replaces the value
  // only when it equals `expected`. Returns the value now current (or `expected`).
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // True when every key exists (torch CHECK). Does not block.
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists or `timeout` passes (torch WAIT).
  // Errors: DeadlineExceeded on timeout; nothing of the wait is left behind on the server.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;

  // Removes `key`; returns whether it existed (torch DELETE_KEY).
  virtual absl::StatusOr<bool> DeleteKey(absl::string_view key) = 0;

  // The number of keys in the whole store, including keys outside any prefix (torch
  // GETNUMKEYS; torch clients' internal `init/` key counts too).
  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // Appends `value` to the value under `key`, creating it (torch 2.x APPEND).
  virtual absl::Status Append(absl::string_view key, absl::string_view value) = 0;

  // Waits for every key as Get does, then returns their values in order (torch 2.x
  // multiGet: WAIT then MULTI_GET).
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(
      const std::vector<std::string>& keys) = 0;

  // Stores each (key, value) pair (torch 2.x MULTI_SET).
  virtual absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& items) = 0;
};

}  // namespace dgt::store

#endif  // DGT_STORE_STORE_H_
