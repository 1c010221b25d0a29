// dgt::store::Client — a TCPStore client for C++ programs: speaks torch 2.x's protocol (VALIDATE
// handshake, CANCEL_WAIT, queues) to dgt's server or to torch's own, or torch 1.x's protocol
// (e.g. to a torch 1.13 server) when asked.
//
// Every blocking call has a deadline: connecting (with reconnect attempts) and each request are
// bounded by ClientOptions::timeout, waits by their own timeout. A broken connection is
// re-established on the next call, retrying with exponential backoff (capped) until that call's
// deadline. Requests that are safe to repeat (set, get, check, wait, num_keys, multi_get,
// multi_set, queue_len, ping, list_keys) are retried once on a fresh connection when the
// connection breaks under them; add, compare_set, append, delete_key and queue push/pop are not,
// and return Unavailable instead.
//
// Thread-safety: thread-safe; calls are serialised over the one connection.
#ifndef DGT_STORE_CLIENT_H_
#define DGT_STORE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dgt/store/store.h"

namespace dgt::store {

enum class Protocol {
  kV2,  // torch >= 2.2: opens with VALIDATE; CANCEL_WAIT, APPEND, MULTI_*, queues, PING.
  kV1,  // torch 1.x (1.13): no handshake; SET..DELETE_KEY only.
};

struct ClientOptions {
  // Server address: an IP literal or a host name.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  Protocol protocol = Protocol::kV2;
  // Deadline of each call: connecting (all attempts together), each request and its reply, and
  // the wait inside Get/MultiGet.
  absl::Duration timeout = absl::Seconds(300);
  // kV2: how long a connected client waits for the answer to its VALIDATE + PING opening (at
  // most `timeout`). A torch 1.x store never answers it: with a short value the error that names
  // protocol v1 comes after this, not after the whole `timeout`, and is final (no reconnect
  // attempts). Infinite: bounded by `timeout` only.
  absl::Duration handshake_timeout = absl::InfiniteDuration();
  // Reconnect backoff: first pause, doubled after each failed attempt up to the maximum.
  absl::Duration initial_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Seconds(1);
};

class Client final : public Store {
 public:
  // Connects (retrying with backoff until options.timeout) and, for kV2, performs the VALIDATE
  // and PING handshake. Errors: InvalidArgument for a bad host or port 0; Unavailable or
  // DeadlineExceeded when no connection could be made in time.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);

  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Store. Protocol::kV1 answers Unimplemented for Append, MultiGet and MultiSet.
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys) override;
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& items) override;

  // torch 2.x only (Unimplemented for kV1).
  // PING: the server echoes `nonce`; returns the round-trip time.
  absl::StatusOr<absl::Duration> Ping(uint32_t nonce = 0x64677421);
  absl::Status QueuePush(absl::string_view key, absl::string_view value);
  // The front item, or nullopt when the queue is empty. Does not block.
  absl::StatusOr<std::optional<std::string>> QueuePop(absl::string_view key);
  absl::StatusOr<int64_t> QueueLen(absl::string_view key);
  // Every key holding a value (LIST_KEYS, opcode 17 of newest torch main; dgt's server has it,
  // torch 2.x releases' servers may not).
  absl::StatusOr<std::vector<std::string>> ListKeys();

  const ClientOptions& options() const;

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgt::store

#endif  // DGT_STORE_CLIENT_H_
