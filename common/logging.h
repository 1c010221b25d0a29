// dgt's logging is spdlog; include this header instead of spdlog directly so that
// absl::string_view (distinct from std::string_view in Debian's Abseil) formats in log calls.
#ifndef DGT_COMMON_LOGGING_H_
#define DGT_COMMON_LOGGING_H_

#include "absl/strings/string_view.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace dgt {

// Sends the default logger to stderr (stdout belongs to the workers' output) at the level named
// by $DGT_LOG_LEVEL (trace, debug, info, warn, error; default info). Call once from main().
void InitLogging();

}  // namespace dgt

#endif  // DGT_COMMON_LOGGING_H_
