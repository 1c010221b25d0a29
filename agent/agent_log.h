// The agent's own log (spdlog's default logger) on stderr: text lines, or JSON lines with
// `--log-format json` ({"time": "...Z", "level": "info", "msg": "..."}), so that worker output
// on stdout stays clean.
#ifndef DGT_AGENT_AGENT_LOG_H_
#define DGT_AGENT_AGENT_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
#include "agent/flags/launch_options.h"

namespace dgt::agent {

// Installs the default logger for `format`.
void ConfigureAgentLog(LogFormat format);

// One JSON log line (without the newline) as --log-format json writes it. `time` is RFC 3339.
std::string JsonLogLine(absl::string_view time, absl::string_view level, absl::string_view msg);

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_LOG_H_
