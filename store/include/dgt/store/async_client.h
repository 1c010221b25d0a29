// dgt::store::AsyncClient — one TCPStore connection driven by an Asio executor, for programs
// that run an event loop (the agent) and must not block it or spend a thread per store.
//
// Requests are framed and replies parsed only by store/wire.h. They are pipelined on the one
// connection in the order they were issued; the server answers them in that order, except that a
// WAIT's answer comes when its keys exist, after the answers to requests sent behind it. So
// while a Wait() is unanswered, the requests issued after it that expect an answer are held back
// (and everything issued behind them, to keep the order); a connection that should watch a key
// and talk at the same time is two AsyncClients.
//
// Completion: every operation's callback runs exactly once, on the executor, never inside the
// call that issued it: with its result; DeadlineExceeded when its timeout passed first;
// Unavailable when the connection failed or was never made; Cancelled after Close() (these run
// inside Close(), so an owner that closes in its destructor sees them while its members still
// exist). Every error message names the store as "store <host>:<port>: ...". A null callback is
// allowed where the result does not matter (Set, Append, Flush).
//
// Deadlines: each operation has a timeout (absl::Duration from the call; InfiniteDuration for a
// watch that lasts as long as the connection). An operation whose timeout passes breaks the
// connection, since its reply would otherwise be taken for the next one's: it completes with
// DeadlineExceeded, and every other pending operation with Unavailable. SET-like requests without
// a reply complete once written.
//
// Reconnect policy: Connect() retries refused or failed connection attempts every
// retry_interval until its timeout (a store host may start after its clients). After the
// connection broke, the client does not reconnect: every later operation completes with
// Unavailable. Make a new AsyncClient to try again (the caller decides how long to insist).
//
// Thread-safety: thread-compatible; call it only on its executor's thread (the callbacks run
// there). Destroying it closes it (callbacks of pending operations run with Cancelled first).
#ifndef DGT_STORE_ASYNC_CLIENT_H_
#define DGT_STORE_ASYNC_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "dgt/store/client.h"

namespace dgt::store {

struct AsyncClientOptions {
  // The store: an IP literal or a host name (resolved at each connection attempt).
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // kV2 opens the connection with torch 2.x's VALIDATE and a PING, whose echo Connect() waits
  // for; kV1 sends torch 1.x opcodes and no opening.
  Protocol protocol = Protocol::kV2;
  // Put in front of every key sent, e.g. "/" to name keys as torch's TCPStore clients do
  // (torch 2.x c10d TCPStore prefixes each user key with "/").
  std::string key_prefix;
  // Pause between connection attempts within Connect()'s timeout.
  absl::Duration retry_interval = absl::Milliseconds(100);
  // A GET / COMPARE_SET reply claiming more bytes than this breaks the connection (DataLoss).
  uint64_t max_value_bytes = 64ull * 1024 * 1024;
};

class AsyncClient {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  using BoolCallback = std::function<void(absl::StatusOr<bool>)>;
  using IntCallback = std::function<void(absl::StatusOr<int64_t>)>;
  using ValueCallback = std::function<void(absl::StatusOr<std::string>)>;

  AsyncClient(boost::asio::any_io_executor executor, AsyncClientOptions options);
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  // Connects within `timeout` (attempts every retry_interval; for kV2 including the
  // VALIDATE + PING opening). Operations issued before it completes are sent once connected.
  // `done`: Ok; DeadlineExceeded "cannot reach the store at <host>:<port>: <last error>" when no
  // attempt succeeded in time; Unavailable when the kV2 opening was refused (a torch 1.x store
  // closes it). Call once.
  void Connect(absl::Duration timeout, StatusCallback done);

  // SET key = value (as torch 2.x TCPStore SET, 1.x opcode 0 / 2.x opcode 1): no reply; `done`
  // gets Ok once the request was written.
  void Set(const std::string& key, const std::string& value, absl::Duration timeout,
           StatusCallback done = nullptr);
  // GET (as TCPStore GET): the value. A torch store answers GET only once the key exists (dgt's
  // server waits; a torch 1.x server drops the connection): use Check() first for keys that may
  // be missing.
  void Get(const std::string& key, absl::Duration timeout, ValueCallback done);
  // ADD (as TCPStore ADD): adds `delta` to the key's decimal value (missing = 0); the sum.
  void Add(const std::string& key, int64_t delta, absl::Duration timeout, IntCallback done);
  // COMPARE_SET (as TCPStore COMPARE_SET): sets `desired` when the value equals `expected` (or
  // the key is missing and `expected` is empty); the key's value afterwards (the current value
  // when it did not match; `expected` when missing and `expected` non-empty).
  void CompareSet(const std::string& key, const std::string& expected, const std::string& desired,
                  absl::Duration timeout, ValueCallback done);
  // CHECK (as TCPStore CHECK): whether every key exists.
  void Check(const std::vector<std::string>& keys, absl::Duration timeout, BoolCallback done);
  // WAIT (as TCPStore WAIT): Ok once every key exists. Holds back later requests that expect an
  // answer (see above).
  void Wait(const std::vector<std::string>& keys, absl::Duration timeout, StatusCallback done);
  // DELETE_KEY (as TCPStore DELETE_KEY): whether the key existed.
  void DeleteKey(const std::string& key, absl::Duration timeout, BoolCallback done);
  // APPEND (as torch 2.x TCPStore APPEND): appends to the value (creates it); no reply.
  // kV1: completes with Unimplemented.
  void Append(const std::string& key, const std::string& value, absl::Duration timeout,
              StatusCallback done = nullptr);
  // Ok once every request issued before it was written (not answered).
  void Flush(absl::Duration timeout, StatusCallback done);

  // Closes the connection: pending operations complete with Cancelled before it returns, later
  // ones with Cancelled on the executor. Idempotent.
  void Close();

  // Ok while the client can still be used (connected or connecting); else why not: the error
  // that broke the connection (Unavailable, or DeadlineExceeded for a connect that timed out) or
  // Cancelled after Close().
  absl::Status status() const;

  // "<host>:<port>", as messages name the store.
  const std::string& endpoint() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dgt::store

#endif  // DGT_STORE_ASYNC_CLIENT_H_
