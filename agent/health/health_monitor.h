// HealthMonitor: runs this node's health checks (docs/RECOVERY.md "Node health checks"): one
// round on the caller's thread before the node joins (RunOnce), then a round every
// --health-interval on a thread of its own (Start), so that a slow check never blocks the
// caller's loop. dgt-run: the first unhealthy round is posted to the agent's loop as
// `on_failure(message)` ("health check 'NAME' failed: REASON"), and no round follows it.
// dgt-agent (stop_at_failure false): every round's verdict is reported, so that a node that
// recovers is seen. When rounds are due is HealthSchedule's decision, what a round means
// RoundVerdict's (health_policy.h).
//
// Thread-safe: RunOnce, Start and Stop from the owner's thread; the round thread only reads the
// checks it owns and reports.
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
    // True (dgt-run): the first unhealthy round ends the rounds; the node leaves its run. False
    // (dgt-agent): rounds go on after a failure.
    bool stop_at_failure = true;
    // When set (not owned), held for the whole of every round: a caller that reaps any child
    // (waitpid(-1)) holds it too, so that it never reaps a user check's process.
    dgt::Mutex* round_mu = nullptr;
  };

  // Told the verdict of each round that Start's thread ran, on that thread: nullopt when
  // healthy, else "health check 'NAME' failed: REASON". Never called once Stop returned.
  using RoundReport = std::function<void(const std::optional<std::string>& failure)>;

  // `on_failure` runs on `io`'s loop, for the first unhealthy round.
  HealthMonitor(boost::asio::io_context& io, Options options,
                std::function<void(const std::string&)> on_failure);
  // `report` runs on the round thread, for every round.
  HealthMonitor(Options options, RoundReport report);
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
  // Rounds every interval from now (a no-op with interval 0 or after Stop). `round_now`: the
  // first one at once, reported as the others are (dgt-agent's before it registers, so that its
  // loop never waits for a check), and with interval 0 that one only.
  void Start(bool round_now = false);
  // Ends the round thread (a running user check is killed within 50 ms); nothing is posted or
  // reported after it returns.
  void Stop();

 private:
  void Loop(bool round_now);
  // One round; nullopt when healthy or cancelled (cancel_).
  std::optional<std::string> Round();
  std::optional<std::string> RoundUnlocked();

  Options options_;
  RoundReport report_;
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
