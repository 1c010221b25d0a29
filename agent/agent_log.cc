#include "agent/agent_log.h"

#include <cstdio>
#include <memory>
#include <mutex>

#include "absl/time/time.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace dgt::agent {
namespace {

class JsonLineSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    absl::Time t = absl::FromChrono(msg.time);
    std::string time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
    auto level = spdlog::level::to_string_view(msg.level);
    std::string line = JsonLogLine(time, absl::string_view(level.data(), level.size()),
                                   absl::string_view(msg.payload.data(), msg.payload.size()));
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

std::string JsonLogLine(absl::string_view time, absl::string_view level, absl::string_view msg) {
  nlohmann::ordered_json j;
  j["time"] = std::string(time);
  j["level"] = std::string(level);
  j["msg"] = std::string(msg);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ConfigureAgentLog(LogFormat format) {
  std::shared_ptr<spdlog::logger> logger;
  if (format == LogFormat::kJson) {
    logger = std::make_shared<spdlog::logger>("dgt-run", std::make_shared<JsonLineSink>());
  } else {
    logger = std::make_shared<spdlog::logger>("dgt-run",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  }
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace dgt::agent
