// HealthCheck: one check of this node's health (docs/RECOVERY.md "Node health checks"), run
// before the node joins a run and every --health-interval while it runs. The built-in checks
// (builtin_checks.h) and the user's commands (command_check.h) share this interface, so the
// runner (health_monitor.h) treats them alike and tests can fake any of them.
//
// Thread-compatible: one runner calls a check at a time; a check may block up to its deadline.
#ifndef DGT_AGENT_HEALTH_HEALTH_CHECK_H_
#define DGT_AGENT_HEALTH_HEALTH_CHECK_H_

#include <string>

#include "absl/time/time.h"

namespace dgt::agent {

// What one run of a check found.
struct HealthResult {
  bool healthy = true;
  // Why the node is unhealthy ("/dev/shm has 12 MiB, below --min-shm-size=64 MiB"); for a
  // healthy result, an optional note for the debug log.
  std::string reason;
};

class HealthCheck {
 public:
  virtual ~HealthCheck() = default;
  // The check's name in messages: "gpu-count", "infiniband", "disk:/var/log", "shm", or the
  // user's command as given.
  virtual std::string name() const = 0;
  // Runs the check; returns by `deadline` (a check that cannot finish by then is unhealthy,
  // naming the timeout). Never throws.
  virtual HealthResult Run(absl::Time deadline) = 0;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_HEALTH_HEALTH_CHECK_H_
