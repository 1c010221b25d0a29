// The progress channel's two ends in one process (ProgressFile, dgt::worker::Progress) and the
// HangMonitor against real child processes: a silent one and a stopped one are killed with the
// reason and note the failure summary shows.
#include "agent/progress/hang_monitor.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "agent/progress/progress_file.h"
#include "common/progress_channel.h"
#include "dgt/worker/progress.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/dgt-hang-XXXXXX";
  return ::mkdtemp(tmpl);
}

// A child in its own process group that sleeps until killed.
pid_t SleepingChild() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (;;) ::pause();
  }
  ::setpgid(pid, pid);
  return pid;
}

TEST(ProgressFileTest, WorkerReportsReachTheAgentsSlot) {
  const std::string dir = TempDir();
  const std::string path = dir + "/progress";
  auto file = ProgressFile::Create(path, 3);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(std::filesystem::file_size(path), 3u * kProgressSlotBytes);
  // The worker's side, as dgt-run's environment sets it up (read once, at the first call).
  ::setenv(kProgressFileEnv, path.c_str(), 1);
  ::setenv(kProgressSlotEnv, "1", 1);
  ASSERT_TRUE(worker::ProgressEnabled());
  for (int i = 0; i < 3; ++i) worker::Progress();
  EXPECT_EQ((*file)->Read(1).counter, 3u);
  EXPECT_FALSE((*file)->Read(1).waiting);
  {
    worker::ProgressWaiting wait;
    EXPECT_TRUE((*file)->Read(1).waiting);
    {
      worker::ProgressWaiting nested;
      EXPECT_TRUE((*file)->Read(1).waiting);
    }
    EXPECT_TRUE((*file)->Read(1).waiting);
  }
  EXPECT_FALSE((*file)->Read(1).waiting);
  EXPECT_EQ((*file)->Read(0).counter, 0u);
  EXPECT_EQ((*file)->Read(2).counter, 0u);
  EXPECT_EQ((*file)->StacksPid(1), 0);
  (*file)->Reset(1);
  EXPECT_EQ((*file)->Read(1).counter, 0u);
  EXPECT_EQ((*file)->Read(7).counter, 0u);  // Out of range: zeros.
  file->reset();
  EXPECT_FALSE(std::filesystem::exists(path));  // Removed with the agent's object.
  EXPECT_EQ(ProgressFile::Create(path, 0).status().message(),
            "progress file needs >= 1 slot, got 0");
  EXPECT_EQ(ProgressFile::Create("/nonexistent/dir/progress", 1).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(ProcessStateTest, ReadsRunningSleepingAndStopped) {
  EXPECT_EQ(ProcessState(::getpid()), 'R');
  const pid_t child = SleepingChild();
  for (int i = 0; i < 200 && ProcessState(child) != 'S'; ++i) ::usleep(5000);
  EXPECT_EQ(ProcessState(child), 'S');
  ::kill(child, SIGSTOP);
  for (int i = 0; i < 200 && ProcessState(child) != 'T'; ++i) ::usleep(5000);
  EXPECT_EQ(ProcessState(child), 'T');
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(ProcessState(child), 0);  // Gone.
}

// Writes a worker's counter and waiting words into `slot` of the progress file at `path`.
void Poke(const std::string& path, int slot, uint64_t counter, uint64_t waiting) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t words[2] = {counter, waiting};
  ASSERT_EQ(::pwrite(fd, words, sizeof(words), slot * kProgressSlotBytes),
            static_cast<ssize_t>(sizeof(words)));
  ::close(fd);
}

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs the loop until `pid` is gone (killed by the monitor), at most `limit`. Returns its
  // waitpid status, or -1 when it was still there.
  int RunUntilGone(boost::asio::io_context& io, pid_t pid, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    int status = 0;
    while (absl::Now() < end) {
      io.run_for(std::chrono::milliseconds(10));
      io.restart();
      if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }

  std::string dir_;
  RealClock clock_;
};

TEST_F(MonitorTest, SilentWorkerIsKilledWithTheReasonAndANoStacksNote) {
  boost::asio::io_context io;
  HangMonitor::Options o;
  o.detector.first_progress_timeout = absl::Milliseconds(200);
  HangMonitor monitor(io, o, &clock_, DefaultProcessLauncher());
  ASSERT_TRUE(monitor.enabled());
  ASSERT_TRUE(monitor.Open(dir_, 2).ok());
  EnvMap env;
  monitor.Prepare(1, dir_ + "/stacks.txt", &env);
  EXPECT_EQ(env.at(kProgressFileEnv), dir_ + "/progress");
  EXPECT_EQ(env.at(kProgressSlotEnv), "1");
  EXPECT_EQ(env.at(kStacksSignalEnv), std::to_string(SIGRTMIN + kStacksSignalOffset));
  EXPECT_EQ(env.at(kStacksFileEnv), dir_ + "/stacks.txt");
  const pid_t child = SleepingChild();
  const absl::Time start = absl::Now();
  monitor.Started(1, 5, child);
  const int status = RunUntilGone(io, child, absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  ASSERT_NE(status, -1);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_GT(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Milliseconds(200 + 1000));  // Loose: a loaded 2-core machine.
  const HangReport* report = monitor.ReportFor(child);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->reason.rfind("no progress report since its start, silent for 0.2 s "
                                 "(--first-progress-timeout=0.2)",
                                 0),
            0u)
      << report->reason;
  EXPECT_EQ(report->note,
            "no stacks: the worker did not register dgt's stack dump (a non-Python worker, or "
            "one that does not import dgt)");
  EXPECT_EQ(report->stacks, "");
  EXPECT_EQ(monitor.ReportFor(child + 1), nullptr);
}

TEST_F(MonitorTest, StoppedWorkerIsKilledWithoutWaitingForStacks) {
  boost::asio::io_context io;
  HangMonitor::Options o;
  o.detector.hang_timeout = absl::Milliseconds(300);
  HangMonitor monitor(io, o, &clock_, DefaultProcessLauncher());
  ASSERT_TRUE(monitor.Open(dir_, 1).ok());
  EnvMap env;
  monitor.Prepare(0, dir_ + "/stacks.txt", &env);
  const pid_t child = SleepingChild();
  monitor.Started(0, 0, child);
  // It reports once and enters a collective (as the worker would), then is stopped: waiting
  // no longer counts.
  Poke(dir_ + "/progress", 0, /*counter=*/1, /*waiting=*/1);
  ::kill(child, SIGSTOP);
  const int status = RunUntilGone(io, child, absl::Seconds(10));
  ASSERT_NE(status, -1);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  const HangReport* report = monitor.ReportFor(child);
  ASSERT_NE(report, nullptr);
  EXPECT_NE(report->reason.find("(stopped: SIGSTOP)"), std::string::npos) << report->reason;
  EXPECT_EQ(report->note, "stopped (SIGSTOP), no stacks");
}

// Two workers silent since their starts: the one started first is silent longer and is declared
// first, whichever local rank it has (the slots are read in local-rank order). An exit forgets it.
TEST_F(MonitorTest, TheLongestSilentIsDeclaredFirst) {
  boost::asio::io_context io;
  HangMonitor::Options o;
  o.detector.first_progress_timeout = absl::Milliseconds(200);
  HangMonitor monitor(io, o, &clock_, DefaultProcessLauncher());
  ASSERT_TRUE(monitor.Open(dir_, 2).ok());
  EnvMap env;
  monitor.Prepare(0, "", &env);
  monitor.Prepare(1, "", &env);
  const pid_t first = SleepingChild();
  monitor.Started(1, 1, first);
  const pid_t second = SleepingChild();
  monitor.Started(0, 0, second);
  EXPECT_EQ(monitor.DeclaredOrder(first), 0);
  std::map<pid_t, int> status;
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (status.size() < 2 && absl::Now() < end) {
    io.run_for(std::chrono::milliseconds(10));
    io.restart();
    for (pid_t pid : {first, second}) {
      int s = 0;
      if (status.count(pid) == 0 && ::waitpid(pid, &s, WNOHANG) == pid) status[pid] = s;
    }
  }
  for (pid_t pid : {first, second}) {
    if (status.count(pid) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(monitor.DeclaredOrder(first), 1);
  EXPECT_EQ(monitor.DeclaredOrder(second), 2);
  EXPECT_GT(monitor.DeclaredAt(first), absl::InfinitePast());
  EXPECT_LE(monitor.DeclaredAt(first), monitor.DeclaredAt(second));
  ASSERT_NE(monitor.ReportFor(second), nullptr);
  monitor.Exited(1, first);
  EXPECT_EQ(monitor.DeclaredOrder(first), 0);
  EXPECT_EQ(monitor.DeclaredAt(first), absl::InfinitePast());
  EXPECT_EQ(monitor.DeclaredOrder(second), 2);
}

}  // namespace
}  // namespace dgt::agent
