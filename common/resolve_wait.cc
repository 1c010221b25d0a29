#include "common/resolve_wait.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "spdlog/spdlog.h"

namespace dgt {

absl::StatusOr<std::string> ResolveWithin(absl::string_view host, absl::string_view what,
                                          absl::Duration timeout, absl::string_view timeout_flag,
                                          const ResolveWaitEnv& env) {
  const absl::Time start = env.now();
  const absl::Time deadline = start + timeout;
  absl::Time next_log = start + kResolveLogInterval;
  // Bounded by the deadline; the count is a second guard against a clock that stands still.
  const int64_t max_tries = timeout / kResolveRetryInterval + 2;
  absl::Status last;
  for (int64_t tries = 0; tries < max_tries; ++tries) {
    auto ip = env.resolve(host);
    if (ip.ok()) return ip;
    last = ip.status();
    const absl::Time now = env.now();
    if (now >= deadline) break;
    if (now >= next_log) {
      env.log(absl::StrCat("waiting for ", what, " '", host, "' to resolve (",
                           FormatFlagSeconds(absl::Trunc(now - start, absl::Seconds(1))), " s of ",
                           FormatFlagSeconds(timeout), " s, ", timeout_flag,
                           "): ", last.message()));
      next_log += kResolveLogInterval;
    }
    env.sleep(std::min(kResolveRetryInterval, deadline - now));
  }
  return absl::DeadlineExceededError(absl::StrCat(what, " '", host, "' did not resolve within ",
                                                  FormatFlagSeconds(timeout), " s (", timeout_flag,
                                                  "): ", last.message()));
}

ResolveWaitEnv RealResolveWaitEnv(absl::string_view log_prefix) {
  ResolveWaitEnv env;
  env.resolve = [](absl::string_view host) { return ResolveToIp(host); };
  env.now = [] { return absl::Now(); };
  env.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  env.log = [prefix = std::string(log_prefix)](const std::string& line) {
    spdlog::info("{}{}", prefix, line);
  };
  return env;
}

}  // namespace dgt
