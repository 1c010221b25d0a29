// A minimal HTTP endpoint for Prometheus: GET /metrics answers the text exposition format that
// `render` returns; anything else is 404. Boost.Beast on its own I/O thread.
// Thread-safety: Start/Stop from one thread; `render` runs on the I/O thread.
#ifndef DGT_RENDEZVOUS_METRICS_HTTP_H_
#define DGT_RENDEZVOUS_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace dgt::rendezvous {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;
  explicit MetricsHttpServer(Render render);
  ~MetricsHttpServer();

  // Listens on `host` (an IP literal) and `port` (0 = free port).
  // Errors: InvalidArgument for a bad host; Unavailable when it cannot bind.
  absl::Status Start(const std::string& host, int port);
  void Stop();
  int port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_METRICS_HTTP_H_
