// Log-once-per-endpoint for a client's retry loop over the endpoints of a replicated service: a
// line about an endpoint is news (its level) only when it differs from the last one about that
// endpoint; repeats go to debug, so a loop logs once per endpoint per change, not every pass.
//
// Pure (it decides the level; the caller logs). Thread-compatible.
#ifndef DGT_REPLICA_ENDPOINT_LOG_H_
#define DGT_REPLICA_ENDPOINT_LOG_H_

#include <map>
#include <string>

#include "common/logging.h"

namespace dgt::replica {

class EndpointLog {
 public:
  // The level to log `text` about `endpoint` at: `level` when it differs from the last line
  // about `endpoint` (or there is none), else debug. Remembers `text` as the last line.
  spdlog::level::level_enum Level(const std::string& endpoint, spdlog::level::level_enum level,
                                  const std::string& text);
  // Records an outcome that is no line (e.g. "registered"): whatever comes next is news.
  void Set(const std::string& endpoint, const std::string& state) { last_[endpoint] = state; }
  // True when the last line about `endpoint` exists and is not `state`: a retry after a failure.
  bool FailedBefore(const std::string& endpoint, const std::string& state) const;
  // Forgets every endpoint (their list changed).
  void Clear() { last_.clear(); }

 private:
  std::map<std::string, std::string> last_;  // endpoint -> the last line or state.
};

}  // namespace dgt::replica

#endif  // DGT_REPLICA_ENDPOINT_LOG_H_
