#include "replica/endpoint_log.h"

namespace dgt::replica {

spdlog::level::level_enum EndpointLog::Level(const std::string& endpoint,
                                             spdlog::level::level_enum level,
                                             const std::string& text) {
  std::string& last = last_[endpoint];
  const bool repeat = text == last;
  last = text;
  return repeat ? spdlog::level::debug : level;
}

bool EndpointLog::FailedBefore(const std::string& endpoint, const std::string& state) const {
  const auto it = last_.find(endpoint);
  return it != last_.end() && it->second != state;
}

}  // namespace dgt::replica
