#include "common/logging.h"

#include <cstdlib>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace dgt {

void InitLogging() {
  auto logger = spdlog::stderr_color_mt("dgt");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("DGT_LOG_LEVEL");
  spdlog::set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::info);
}

}  // namespace dgt
