// The built-in health checks (agent/health/builtin_checks.h) over a fake file system and over a
// real tree, the user's command checks (agent/health/command_check.h) with real /bin/sh
// processes, and the health flags (agent/flags/health_flags.h).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/flags/health_flags.h"
#include "agent/flags/launch_options.h"
#include "agent/health/builtin_checks.h"
#include "agent/health/command_check.h"
#include "agent/health/health_monitor.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

const absl::Time kFar = absl::InfiniteFuture();

class FakeHealthFs final : public HealthFs {
 public:
  std::map<std::string, std::vector<std::string>> dirs;
  std::map<std::string, std::string> files;
  std::map<std::string, FsSpace> spaces;
  std::set<std::string> read_only;

  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    auto it = dirs.find(path);
    if (it == dirs.end()) return absl::NotFoundError(absl::StrCat(path, ": No such file"));
    return it->second;
  }
  absl::StatusOr<std::string> Read(const std::string& path) override {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError(absl::StrCat(path, ": No such file"));
    return it->second;
  }
  absl::StatusOr<FsSpace> Space(const std::string& path) override {
    auto it = spaces.find(path);
    if (it == spaces.end()) return absl::NotFoundError(absl::StrCat(path, ": No such file"));
    return it->second;
  }
  absl::Status ProbeWrite(const std::string& dir) override {
    if (read_only.count(dir) > 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot create a file in ", dir, ": Read-only file system"));
    }
    return absl::OkStatus();
  }
};

TEST(GpuCountCheckTest, CountsTheNumberedDeviceNodesOnly) {
  FakeHealthFs fs;
  fs.dirs["/dev"] = {"null",      "nvidia0",  "nvidia1", "nvidia-uvm",
                     "nvidiactl", "nvidia10", "nvidiax"};
  auto check = GpuCountCheck(&fs, 3);
  EXPECT_EQ(check->name(), "gpu-count");
  const HealthResult ok = check->Run(kFar);
  EXPECT_TRUE(ok.healthy);
  EXPECT_EQ(ok.reason, "3 GPU(s)");
  const HealthResult missing = GpuCountCheck(&fs, 4)->Run(kFar);
  EXPECT_FALSE(missing.healthy);
  EXPECT_EQ(missing.reason, "found 3 GPU(s) (/dev/nvidiaN), expected 4 (--expected-gpus)");
}

TEST(InfinibandCheckTest, HealthyWithoutDevicesAndWithEveryPortActive) {
  FakeHealthFs fs;
  EXPECT_EQ(InfinibandCheck(&fs)->Run(kFar).reason, "no InfiniBand device");
  EXPECT_TRUE(InfinibandCheck(&fs)->Run(kFar).healthy);
  fs.dirs["/sys/class/infiniband"] = {"mlx5_0", "mlx5_1"};
  fs.dirs["/sys/class/infiniband/mlx5_0/ports"] = {"1"};
  fs.dirs["/sys/class/infiniband/mlx5_1/ports"] = {"1", "2"};
  fs.files["/sys/class/infiniband/mlx5_0/ports/1/state"] = "4: ACTIVE\n";
  fs.files["/sys/class/infiniband/mlx5_1/ports/1/state"] = "4: ACTIVE\n";
  fs.files["/sys/class/infiniband/mlx5_1/ports/2/state"] = "4: ACTIVE\n";
  const HealthResult ok = InfinibandCheck(&fs)->Run(kFar);
  EXPECT_TRUE(ok.healthy);
  EXPECT_EQ(ok.reason, "3 InfiniBand port(s) ACTIVE");
}

TEST(InfinibandCheckTest, AnUnpluggedSecondPortIsHealthy) {
  FakeHealthFs fs;
  fs.dirs["/sys/class/infiniband"] = {"mlx5_0"};
  fs.dirs["/sys/class/infiniband/mlx5_0/ports"] = {"1", "2"};
  fs.files["/sys/class/infiniband/mlx5_0/ports/1/state"] = "4: ACTIVE\n";
  fs.files["/sys/class/infiniband/mlx5_0/ports/2/state"] = "1: DOWN\n";
  const HealthResult r = InfinibandCheck(&fs)->Run(kFar);
  EXPECT_TRUE(r.healthy);
  EXPECT_EQ(r.reason, "1 InfiniBand port(s) ACTIVE");
}

TEST(InfinibandCheckTest, ADeviceWithEveryPortDownIsNamed) {
  FakeHealthFs fs;
  fs.dirs["/sys/class/infiniband"] = {"mlx5_0", "mlx5_1"};
  fs.dirs["/sys/class/infiniband/mlx5_0/ports"] = {"1"};
  fs.dirs["/sys/class/infiniband/mlx5_1/ports"] = {"1"};
  fs.files["/sys/class/infiniband/mlx5_0/ports/1/state"] = "4: ACTIVE\n";
  fs.files["/sys/class/infiniband/mlx5_1/ports/1/state"] = "1: DOWN\n";
  const HealthResult r = InfinibandCheck(&fs)->Run(kFar);
  EXPECT_FALSE(r.healthy);
  EXPECT_EQ(r.reason, "mlx5_1 has no ACTIVE port (port 1 is 1: DOWN)");
}

TEST(FreeDiskCheckTest, BelowTheMinimumNamesTheDirAndBothSizes) {
  FakeHealthFs fs;
  fs.spaces["/logs"] = {uint64_t{100} << 30, uint64_t{512} << 20};
  auto check = FreeDiskCheck(&fs, "log dir", "/logs", uint64_t{1} << 30);
  EXPECT_EQ(check->name(), "disk:/logs");
  const HealthResult r = check->Run(kFar);
  EXPECT_FALSE(r.healthy);
  EXPECT_EQ(r.reason, "the log dir /logs has 512 MiB free, below --min-free-disk=1 GiB");
  fs.spaces["/logs"].available = (uint64_t{3} << 29);  // 1.5 GiB
  const HealthResult ok = check->Run(kFar);
  EXPECT_TRUE(ok.healthy);
  EXPECT_EQ(ok.reason, "1.5 GiB");
  const HealthResult gone = FreeDiskCheck(&fs, "work dir", "/gone", 1)->Run(kFar);
  EXPECT_FALSE(gone.healthy);
  EXPECT_EQ(gone.reason, "cannot read the free space of the work dir: /gone: No such file");
}

TEST(ShmCheckTest, MustBeWritableAndBigEnough) {
  FakeHealthFs fs;
  fs.spaces["/dev/shm"] = {uint64_t{32} << 20, uint64_t{32} << 20};
  const HealthResult small = ShmCheck(&fs, uint64_t{64} << 20)->Run(kFar);
  EXPECT_FALSE(small.healthy);
  EXPECT_EQ(small.reason, "/dev/shm holds 32 MiB, below --min-shm-size=64 MiB");
  EXPECT_TRUE(ShmCheck(&fs, uint64_t{32} << 20)->Run(kFar).healthy);
  fs.read_only.insert("/dev/shm");
  const HealthResult ro = ShmCheck(&fs, 0)->Run(kFar);
  EXPECT_FALSE(ro.healthy);
  EXPECT_EQ(ro.reason, "cannot create a file in /dev/shm: Read-only file system");
}

TEST(FormatBytesTest, Units) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{64} << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 29), "1.5 GiB");
}

class SystemHealthFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/dgt-health-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    root_ = templ;
    ASSERT_EQ(mkdir((root_ + "/dev").c_str(), 0755), 0);
    for (const char* n : {"nvidia0", "nvidia1", "nvidiactl"}) {
      std::ofstream(root_ + "/dev/" + n) << "";
    }
    ASSERT_EQ(mkdir((root_ + "/dev/shm").c_str(), 0755), 0);
  }
  void TearDown() override {
    std::string cmd = absl::StrCat("rm -rf '", root_, "'");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string root_;
};

TEST_F(SystemHealthFsTest, ReadsUnderItsRoot) {
  auto fs = SystemHealthFs(root_);
  const HealthResult gpus = GpuCountCheck(fs.get(), 2)->Run(kFar);
  EXPECT_TRUE(gpus.healthy) << gpus.reason;
  EXPECT_EQ(gpus.reason, "2 GPU(s)");
  // No /sys/class/infiniband under the root.
  EXPECT_EQ(InfinibandCheck(fs.get())->Run(kFar).reason, "no InfiniBand device");
  EXPECT_TRUE(fs->ProbeWrite("/dev/shm").ok());
  absl::StatusOr<std::vector<std::string>> left = fs->List("/dev/shm");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());  // The probe's file is removed.
  EXPECT_EQ(fs->List("/nope").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<FsSpace> space = fs->Space("/dev");
  ASSERT_TRUE(space.ok());
  EXPECT_GT(space->total, 0u);
}

TEST(CommandCheckTest, ExitZeroIsHealthyElseTheOutputIsTheReason) {
  auto ok = CommandCheck("echo fine", absl::Seconds(10));
  EXPECT_EQ(ok->name(), "echo fine");
  const HealthResult r = ok->Run(kFar);
  EXPECT_TRUE(r.healthy);
  EXPECT_EQ(r.reason, "fine");
  const HealthResult bad =
      CommandCheck("echo 'ECC errors: 3' >&2; exit 4", absl::Seconds(10))->Run(kFar);
  EXPECT_FALSE(bad.healthy);
  EXPECT_EQ(bad.reason, "exited with code 4: ECC errors: 3");
  const HealthResult killed = CommandCheck("kill -SEGV $$", absl::Seconds(10))->Run(kFar);
  EXPECT_EQ(killed.reason, "killed by SIGSEGV: (no output)");
  const HealthResult missing = CommandCheck("/no/such/check", absl::Seconds(10))->Run(kFar);
  EXPECT_FALSE(missing.healthy);
  EXPECT_EQ(missing.reason, "exited with code 127: /bin/sh: 1: /no/such/check: not found");
}

TEST(CommandCheckTest, AHangingCheckIsKilledAtItsTimeoutWithWhatItStarted) {
  char templ[] = "/tmp/dgt-health-pid-XXXXXX";
  const int fd = mkstemp(templ);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string pid_file = templ;
  const absl::Time start = absl::Now();
  const HealthResult r =
      CommandCheck(absl::StrCat("echo starting; sleep 300 & echo $! > ", pid_file, "; wait"),
                   absl::Milliseconds(300))
          ->Run(kFar);
  const absl::Duration took = absl::Now() - start;
  EXPECT_FALSE(r.healthy);
  EXPECT_EQ(r.reason, "did not finish within 0.3 s (--health-check-timeout); killed: starting");
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(5));
  std::ifstream in(pid_file);
  pid_t sleeper = 0;
  in >> sleeper;
  ASSERT_GT(sleeper, 0);
  // The background sleep died with the check's process group (reaped by init, or a zombie of
  // the shell that is gone).
  for (int i = 0; i < 100 && kill(sleeper, 0) == 0; ++i) usleep(10000);
  std::ifstream stat(absl::StrCat("/proc/", sleeper, "/stat"));
  std::string pid_text, comm, state;
  if (stat >> pid_text >> comm >> state) {
    EXPECT_EQ(state, "Z");
  }
  unlink(pid_file.c_str());
}

TEST(CommandCheckTest, OneMegabyteOfOutputKeepsTheLast4KiB) {
  const HealthResult r =
      CommandCheck("head -c 1048576 /dev/zero | tr '\\0' x; echo; echo last line; exit 1",
                   absl::Seconds(20))
          ->Run(kFar);
  EXPECT_FALSE(r.healthy);
  const std::string prefix = "exited with code 1: [output cut: the last 4096 of 1048587 bytes] ";
  ASSERT_EQ(r.reason.substr(0, prefix.size()), prefix);
  EXPECT_EQ(r.reason.size(), prefix.size() + 4095);  // The final newline stripped.
  EXPECT_EQ(r.reason.substr(r.reason.size() - 10), "\nlast line");
}

TEST(CommandCheckTest, CancelEndsARunEarly) {
  std::atomic<bool> cancel{true};
  const absl::Time start = absl::Now();
  const CommandEnd end = RunHealthCommand("sleep 30", absl::Now() + absl::Seconds(30), &cancel);
  EXPECT_TRUE(end.timed_out);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(CommandCheckTest, TheGroupIsTrackedWhileTheCommandRuns) {
  std::vector<std::pair<pid_t, bool>> calls;
  const CommandEnd end =
      RunHealthCommand("echo ok", absl::Now() + absl::Seconds(30), nullptr,
                       [&](pid_t pgid, bool running) { calls.emplace_back(pgid, running); });
  EXPECT_EQ(end.exit_code, 0);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_GT(calls[0].first, 0);
  EXPECT_TRUE(calls[0].second);
  EXPECT_EQ(calls[1], std::make_pair(calls[0].first, false));
}

// Healthy for its first `healthy_runs` runs, then unhealthy.
class CountingCheck final : public HealthCheck {
 public:
  explicit CountingCheck(int healthy_runs, std::atomic<int>* runs)
      : healthy_runs_(healthy_runs), runs_(runs) {}
  std::string name() const override { return "counting"; }
  HealthResult Run(absl::Time) override {
    const int n = ++*runs_;
    if (n <= healthy_runs_) return {true, ""};
    return {false, absl::StrCat("run ", n)};
  }

 private:
  int healthy_runs_;
  std::atomic<int>* runs_;
};

TEST(HealthMonitorTest, RoundsOffTheLoopUntilTheFirstFailure) {
  boost::asio::io_context io;
  std::atomic<int> runs{0};
  std::vector<std::string> failures;
  HealthMonitor::Options o;
  o.interval = absl::Milliseconds(100);
  HealthMonitor m(io, o, [&](const std::string& message) {
    failures.push_back(message);
    io.stop();
  });
  m.Add(std::make_unique<CountingCheck>(3, &runs));
  EXPECT_EQ(m.RunOnce(), std::nullopt);  // Run 1, before the join.
  m.Start();
  auto guard = boost::asio::make_work_guard(io);
  io.run_for(std::chrono::seconds(20));
  // Runs 2 and 3 healthy, run 4 fails; no round after it.
  EXPECT_EQ(failures, std::vector<std::string>{"health check 'counting' failed: run 4"});
  m.Stop();
  EXPECT_EQ(runs.load(), 4);
}

// Unhealthy on the runs in `failing`, else healthy; records a run on the round thread that found
// `round_mu` free.
class ScriptedCheck final : public HealthCheck {
 public:
  ScriptedCheck(std::set<int> failing, dgt::Mutex* round_mu, std::atomic<int>* runs,
                std::atomic<bool>* unlocked)
      : failing_(std::move(failing)), round_mu_(round_mu), runs_(runs), unlocked_(unlocked) {}
  std::string name() const override { return "scripted"; }
  HealthResult Run(absl::Time) override {
    const int n = ++*runs_;
    // Run 1 is RunOnce's, on the thread that holds round_mu: a try there would be undefined.
    if (n > 1 && round_mu_->TryLock()) {
      unlocked_->store(true);
      round_mu_->Unlock();
    }
    if (failing_.contains(n)) return {false, absl::StrCat("run ", n)};
    return {true, ""};
  }

 private:
  std::set<int> failing_;
  dgt::Mutex* round_mu_;
  std::atomic<int>* runs_;
  std::atomic<bool>* unlocked_;
};

// dgt-agent's way: rounds go on after a failure, each verdict is reported on the round thread,
// and every round holds round_mu.
TEST(HealthMonitorTest, RoundsGoOnAfterAFailureWithoutStopAtFailure) {
  dgt::Mutex round_mu;
  std::atomic<int> runs{0};
  std::atomic<bool> unlocked{false};
  dgt::Mutex mu;
  dgt::CondVar cv;
  std::vector<std::string> verdicts;
  HealthMonitor::Options o;
  o.interval = absl::Milliseconds(100);
  o.stop_at_failure = false;
  o.round_mu = &round_mu;
  HealthMonitor m(std::move(o), [&](const std::optional<std::string>& failure) {
    dgt::MutexLock lock(&mu);
    verdicts.push_back(failure.value_or("healthy"));
    cv.SignalAll();
  });
  m.Add(std::make_unique<ScriptedCheck>(std::set<int>{2, 3}, &round_mu, &runs, &unlocked));
  EXPECT_EQ(m.RunOnce(), std::nullopt);  // Run 1, on this thread: not reported.
  m.Start();
  {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    dgt::MutexLock lock(&mu);
    while (verdicts.size() < 4 && !cv.WaitWithDeadline(&mu, deadline)) {
    }
  }
  m.Stop();
  dgt::MutexLock lock(&mu);
  ASSERT_GE(verdicts.size(), 4u);
  verdicts.resize(4);
  EXPECT_EQ(verdicts, (std::vector<std::string>{"health check 'scripted' failed: run 2",
                                                "health check 'scripted' failed: run 3", "healthy",
                                                "healthy"}));
  EXPECT_FALSE(unlocked.load());
}

// Start(round_now) with interval 0: one round, at once, reported; then none.
TEST(HealthMonitorTest, RoundNowWithIntervalZeroRunsOneRound) {
  std::atomic<int> runs{0};
  dgt::Mutex mu;
  dgt::CondVar cv;
  std::vector<std::string> verdicts;
  HealthMonitor::Options o;
  o.interval = absl::ZeroDuration();
  o.stop_at_failure = false;
  HealthMonitor m(std::move(o), [&](const std::optional<std::string>& failure) {
    dgt::MutexLock lock(&mu);
    verdicts.push_back(failure.value_or("healthy"));
    cv.SignalAll();
  });
  m.Add(std::make_unique<CountingCheck>(0, &runs));
  m.Start(/*round_now=*/true);
  {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    dgt::MutexLock lock(&mu);
    while (verdicts.empty() && !cv.WaitWithDeadline(&mu, deadline)) {
    }
  }
  usleep(300000);  // Time for a second round, were there one.
  m.Stop();
  dgt::MutexLock lock(&mu);
  EXPECT_EQ(verdicts, std::vector<std::string>{"health check 'counting' failed: run 1"});
  EXPECT_EQ(runs.load(), 1);
}

TEST(HealthMonitorTest, StopEndsAHangingCheckAndPostsNothing) {
  boost::asio::io_context io;
  std::vector<std::string> failures;
  HealthMonitor::Options o;
  o.interval = absl::Milliseconds(100);
  o.check_timeout = absl::Seconds(300);
  HealthMonitor m(io, o, [&](const std::string& message) { failures.push_back(message); });
  HealthFlags flags;
  flags.commands = {"sleep 300"};
  auto fs = SystemHealthFs();
  m.AddChecksFor(flags, "", "", fs.get());
  // infiniband, shm, then the command; no disk check without dirs.
  EXPECT_EQ(m.size(), 3u);
  m.Start();
  usleep(300000);  // The first round is running `sleep 300` now.
  const absl::Time start = absl::Now();
  m.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  io.poll();
  EXPECT_TRUE(failures.empty());
}

TEST(ParseByteSizeTest, BytesAndBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("--min-free-disk", "0"), 0u);
  EXPECT_EQ(*ParseByteSize("--min-free-disk", "4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("--min-free-disk", "64M"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseByteSize("--min-free-disk", "1.5g"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("--min-free-disk", "2T"), uint64_t{2} << 40);
  for (const char* bad : {"", "1X", "-1", "G", "nan", "1e30"}) {
    absl::StatusOr<uint64_t> r = ParseByteSize("--min-free-disk", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              absl::StrCat("--min-free-disk must be a size (bytes, or with K, M, G, T), at most "
                           "1048576T, got '",
                           bad, "'"));
  }
}

ParsedCommandLine Parse(std::vector<std::string> args) {
  args.push_back("/bin/true");
  args.insert(args.begin(), "--no-python");
  return ParseDgtRunCommandLine(args, [](const char*) -> const char* { return nullptr; });
}

TEST(HealthFlagsTest, DefaultsAndValues) {
  ParsedCommandLine d = Parse({});
  ASSERT_TRUE(d.options) << d.output;
  const HealthFlags& h = d.options->health;
  EXPECT_TRUE(h.commands.empty());
  EXPECT_EQ(h.interval_s, 60);
  EXPECT_EQ(h.check_timeout_s, 60);
  EXPECT_EQ(h.expected_gpus, -1);
  EXPECT_EQ(h.min_free_disk, 0u);  // Off unless asked for.
  EXPECT_EQ(h.min_shm_size, uint64_t{64} << 20);
  ParsedCommandLine p =
      Parse({"--health-check", "a.sh --x", "--health_check=b.sh", "--health-check", "c.sh",
             "--health-interval=0", "--health-check-timeout", "2.5", "--expected-gpus=8",
             "--min-free-disk=10G", "--min-shm-size=0"});
  ASSERT_TRUE(p.options) << p.output;
  const HealthFlags& g = p.options->health;
  EXPECT_EQ(g.commands, (std::vector<std::string>{"a.sh --x", "b.sh", "c.sh"}));
  // The script stays the script.
  EXPECT_EQ(p.options->command, (std::vector<std::string>{"/bin/true"}));
  EXPECT_EQ(g.interval_s, 0);
  EXPECT_EQ(g.check_timeout_s, 2.5);
  EXPECT_EQ(g.expected_gpus, 8);
  EXPECT_EQ(g.min_free_disk, uint64_t{10} << 30);
  EXPECT_EQ(g.min_shm_size, 0u);
}

TEST(HealthFlagsTest, BadValuesAreUsageErrorsNamingTheFlag) {
  const std::map<std::vector<std::string>, std::string> cases = {
      {{"--health-interval=0.01"},
       "dgt-run: error: --health-interval must be 0 (only before the join) or at least 0.1 "
       "seconds, got '0.01'\n"},
      {{"--health-check-timeout=0"},
       "dgt-run: error: --health-check-timeout must be a number of seconds from 0.1 to 31536000 "
       "(a year), got '0'\n"},
      {{"--expected-gpus=-1"},
       "dgt-run: error: --expected-gpus must be an integer from 0 to 4096, got '-1'\n"},
      {{"--min-shm-size=lots"},
       "dgt-run: error: --min-shm-size must be a size (bytes, or with K, M, G, T), at most "
       "1048576T, got 'lots'\n"},
  };
  for (const auto& [args, message] : cases) {
    ParsedCommandLine p = Parse(args);
    EXPECT_EQ(p.exit_code, 2) << args[0];
    EXPECT_EQ(p.output, message);
  }
  RawHealthFlags blank;
  blank.commands = {"ok.sh", " "};
  HealthFlags out;
  EXPECT_EQ(ParseHealthFlags(blank, &out),
            absl::InvalidArgumentError("--health-check needs a command, got an empty one"));
}

}  // namespace
}  // namespace dgt::agent
