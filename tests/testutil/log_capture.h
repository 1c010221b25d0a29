// LogCapture: the default spdlog logger's lines, "<level> <text>", while it is alive.
#ifndef DGT_TESTS_TESTUTIL_LOG_CAPTURE_H_
#define DGT_TESTS_TESTUTIL_LOG_CAPTURE_H_

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace dgt::testing {

// Replaces the default logger with one that keeps every line at `level` or above; the previous
// logger is back once this is destroyed. Not thread-safe to read while another thread logs:
// read it once the logging threads stopped (or from the thread that logs).
class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::info)
      : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    sink->set_pattern("%l %v");
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_level(level);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything captured, one "<level> <text>\n" per line.
  std::string text() const { return log_.str(); }
  // The same, split into lines.
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(log_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace dgt::testing

#endif  // DGT_TESTS_TESTUTIL_LOG_CAPTURE_H_
