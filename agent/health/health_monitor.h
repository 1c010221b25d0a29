// HealthMonitor: runs this node's health checks (docs/RECOVERY.md "Node health checks"): one
// round on the caller's thread before the node joins (RunOnce), then a round every
// --health-interval on a thread of its own (Start), so that a slow check never blocks the
// agent's event loop. The first unhealthy round is posted to the loop as `on_failure(message)`
// ("health check 'NAME' failed: REASON"), and no round follows it. When rounds are due is
// HealthSchedule's decision, what a round means RoundVerdict's (health_policy.h).
//
// Thread-safe: RunOnce, Start and Stop from the agent's thread; the round thread only reads the
// checks it owns and posts to the loop.
#ifndef DGT_AGENT_HEALTH_HEALTH_MONITOR_H_
#define DGT_AGENT_HEALTH_HEALTH_MONITOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "agent/flags/health_flags.h"
#include "agent/health/builtin_checks.h"
#include "agent/health/command_check.h"
#include "agent/health/health_check.h"
#include "boost/asio.hpp"
#include "common/mutex.h"

namespace dgt::agent {

class HealthMonitor {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(60);       // 0: RunOnce only.
    absl::Duration check_timeout = absl::Seconds(60);  // Each check's deadline.
    // Told each user check's process group (command_check.h); may be empty.
    GroupTracker track_group;
  };

  // `on_failure` runs on `io`'s loop.
  HealthMonitor(boost::asio::io_context& io, Options options,
                std::function<void(const std::string&)> on_failure);
  // Stop()s.
  ~HealthMonitor();

  // The checks dgt-run's flags ask for: the built-ins (gpu-count with --expected-gpus,
  // infiniband, disk:<log dir> when one is given and disk:<work dir> with --min-free-disk above
  // 0, shm), then each --health-check in order. `fs` (not owned) outlives the monitor.
  void AddChecksFor(const HealthFlags& flags, const std::string& log_dir,
                    const std::string& work_dir, HealthFs* fs);
  void Add(std::unique_ptr<HealthCheck> check);
  // For a --health-check: a CommandCheck that Stop cancels.
  void AddCommand(const std::string& command);
  size_t size() const { return checks_.size(); }

  // One round now, on the caller's thread. Returns the failure message, nullopt when healthy.
  std::optional<std::string> RunOnce();
  // Rounds every interval from now (a no-op with interval 0 or after Stop).
  void Start();
  // Ends the round thread (a running user check is killed within 50 ms); nothing is posted
  // after it returns.
  void Stop();

 private:
  void Loop();
  std::optional<std::string> Round();

  boost::asio::io_context& io_;
  Options options_;
  std::function<void(const std::string&)> on_failure_;
  std::vector<std::unique_ptr<HealthCheck>> checks_;
  std::atomic<bool> cancel_{false};
  // dgt's Mutex (std::mutex underneath), which ThreadSanitizer sees, unlike Debian's Abseil.
  dgt::Mutex mu_;
  dgt::CondVar stop_cv_;  // Signalled by Stop.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  // Expires with the monitor: posted failures check it.
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_HEALTH_HEALTH_MONITOR_H_
