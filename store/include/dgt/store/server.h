// dgt::store::Server — a TCP server speaking PyTorch's TCPStore wire protocol, so unmodified
// torch workers (1.x and 2.x clients, told apart per connection) use it as their c10d store.
// Embeddable in any process: it runs its own I/O thread.
//
// Thread-safety: Start/Stop/port may be called from any thread; Stop is idempotent and also
// runs in the destructor.
#ifndef DGT_STORE_SERVER_H_
#define DGT_STORE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dgt::store {

struct ServerOptions {
  // Address to bind: an IPv4 or IPv6 literal. "0.0.0.0" / "::" bind every interface; the
  // default binds loopback only.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (read it back with port()).
  uint16_t port = 0;
  // Per-request limits; a request over a limit closes that connection with a logged reason.
  uint64_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 64ull * 1024 * 1024;
  uint64_t max_keys_per_request = 128 * 1024;
  // Connections beyond this are accepted and closed at once (with a logged reason).
  size_t max_connections = 65536;
  // A connection that sends nothing for this long, and has no WAIT pending, is closed with a
  // logged reason. Zero (the default) turns this off, because torch 1.x clients keep a second,
  // silent callback connection open for the whole job and a training step can leave the
  // request connection quiet for hours; set it for stores that face untrusted networks.
  absl::Duration idle_timeout = absl::ZeroDuration();
};

// A snapshot of the server's state, for tests, metrics and `dgt store` operators.
struct ServerStats {
  size_t connections = 0;
  size_t keys = 0;
  size_t pending_waits = 0;
  uint64_t closed_by_server = 0;  // Connections the server closed (limits, bad input, idle).
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the I/O thread.
  // Errors: InvalidArgument for a host that is not an IP literal; AlreadyExists when the port is
  // taken; FailedPrecondition when already started.
  absl::Status Start();

  // Closes the listener and every connection, and joins the I/O thread.
  void Stop();

  // The bound port (valid after Start).
  uint16_t port() const;

  // Taken on the I/O thread; zeros when the server is not running.
  ServerStats Stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgt::store

#endif  // DGT_STORE_SERVER_H_
