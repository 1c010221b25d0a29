// Waiting for a DNS name that is not published yet: a Kubernetes pod's name in its headless
// Service appears only once the pod has an IP, so the other pods' first lookups fail with "Name
// or service not known". ResolveWithin retries until a deadline and says what it waits for.
//
// Thread-compatible: the clock, sleep, resolver and log are the caller's seams.
#ifndef DGT_COMMON_RESOLVE_WAIT_H_
#define DGT_COMMON_RESOLVE_WAIT_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt {

struct ResolveWaitEnv {
  // One lookup: a numeric address, or an error (ResolveToIp).
  std::function<absl::StatusOr<std::string>(absl::string_view)> resolve;
  std::function<absl::Time()> now;
  std::function<void(absl::Duration)> sleep;
  std::function<void(const std::string&)> log;  // One progress line.
};

// The pause between lookups, and how often a line says the wait goes on.
inline constexpr absl::Duration kResolveRetryInterval = absl::Seconds(1);
inline constexpr absl::Duration kResolveLogInterval = absl::Seconds(10);

// Resolves `host`, retrying every kResolveRetryInterval until `timeout` has passed since the
// call, and logging "waiting for <what> '<host>' to resolve (<n> s of <timeout> s, <timeout
// flag>): <last error>" every kResolveLogInterval of waiting. Returns the address of the first
// lookup that succeeds.
// Errors: DeadlineExceeded naming `what`, `host`, the timeout and `timeout_flag` and the last
// lookup's error, once the timeout has passed.
absl::StatusOr<std::string> ResolveWithin(absl::string_view host, absl::string_view what,
                                          absl::Duration timeout, absl::string_view timeout_flag,
                                          const ResolveWaitEnv& env);

// The real seams: ResolveToIp, absl::Now, absl::SleepFor and spdlog's info level, each line
// after `log_prefix` ("dgt-run: ").
ResolveWaitEnv RealResolveWaitEnv(absl::string_view log_prefix);

}  // namespace dgt

#endif  // DGT_COMMON_RESOLVE_WAIT_H_
