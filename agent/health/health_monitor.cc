#include "agent/health/health_monitor.h"

#include <utility>

#include "absl/time/clock.h"
#include "agent/health/command_check.h"
#include "agent/health/health_policy.h"
#include "common/logging.h"

namespace dgt::agent {

HealthMonitor::HealthMonitor(boost::asio::io_context& io, Options options,
                             std::function<void(const std::string&)> on_failure)
    : options_(std::move(options)) {
  std::weak_ptr<int> life = life_;
  report_ = [&io, life,
             on_failure = std::move(on_failure)](const std::optional<std::string>& failure) {
    if (!failure) return;
    boost::asio::post(io, [life, on_failure, message = *failure] {
      if (!life.expired()) on_failure(message);
    });
  };
}

HealthMonitor::HealthMonitor(Options options, RoundReport report)
    : options_(std::move(options)), report_(std::move(report)) {}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::AddChecksFor(const HealthFlags& flags, const std::string& log_dir,
                                 const std::string& work_dir, HealthFs* fs) {
  if (flags.expected_gpus >= 0) Add(GpuCountCheck(fs, flags.expected_gpus));
  Add(InfinibandCheck(fs));
  if (flags.min_free_disk > 0) {
    if (!log_dir.empty()) Add(FreeDiskCheck(fs, "log dir", log_dir, flags.min_free_disk));
    if (!work_dir.empty()) Add(FreeDiskCheck(fs, "work dir", work_dir, flags.min_free_disk));
  }
  Add(ShmCheck(fs, flags.min_shm_size));
  for (const std::string& c : flags.commands) AddCommand(c);
}

void HealthMonitor::Add(std::unique_ptr<HealthCheck> check) { checks_.push_back(std::move(check)); }

void HealthMonitor::AddCommand(const std::string& command) {
  Add(CommandCheck(command, options_.check_timeout, &cancel_, options_.track_group));
}

std::optional<std::string> HealthMonitor::Round() {
  if (options_.round_mu == nullptr) return RoundUnlocked();
  dgt::MutexLock lock(options_.round_mu);
  return RoundUnlocked();
}

std::optional<std::string> HealthMonitor::RoundUnlocked() {
  std::vector<NamedResult> results;
  for (const std::unique_ptr<HealthCheck>& c : checks_) {
    if (cancel_.load()) return std::nullopt;
    NamedResult r{c->name(), c->Run(absl::Now() + options_.check_timeout)};
    const bool healthy = r.result.healthy;
    results.push_back(std::move(r));
    if (!healthy) break;  // The first failure is the verdict; the rest need not run.
  }
  if (cancel_.load()) return std::nullopt;
  return RoundVerdict(results);
}

std::optional<std::string> HealthMonitor::RunOnce() { return Round(); }

void HealthMonitor::Start(bool round_now) {
  HealthSchedule probe(options_.interval);
  if ((!probe.periodic() && !round_now) || thread_.joinable() || cancel_.load()) return;
  thread_ = std::thread([this, round_now] { Loop(round_now); });
}

void HealthMonitor::Loop(bool round_now) {
  HealthSchedule schedule(options_.interval);
  if (!round_now) {
    // The round before the join counts as the first.
    schedule.Started(absl::Now());
    schedule.Finished(absl::Now());
  }
  for (bool first = round_now;; first = false) {
    if (!first) {
      const std::optional<absl::Time> next = schedule.NextRun();
      if (!next) return;  // Interval 0: the one round is done.
      dgt::MutexLock lock(&mu_);
      // Until the next round is due, or Stop.
      while (!stopping_ && absl::Now() < *next) stop_cv_.WaitWithDeadline(&mu_, *next);
      if (stopping_) return;
    }
    schedule.Started(absl::Now());
    std::optional<std::string> failure = Round();
    schedule.Finished(absl::Now());
    if (cancel_.load()) return;  // Stopped mid-round: the verdict means nothing.
    report_(failure);
    if (failure && options_.stop_at_failure) return;
  }
}

void HealthMonitor::Stop() {
  cancel_.store(true);
  {
    dgt::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dgt::agent
