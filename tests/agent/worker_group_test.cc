// WorkerGroup with real, tiny /bin/sh workers: exit events, log routing, stop grace, hooks.
// Every run of the event loop is bounded.
#include "agent/workers/worker_group.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

WorkerSpec Shell(const std::string& script, int rank = 0) {
  WorkerSpec spec;
  spec.rank = rank;
  spec.local_rank = rank;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  return spec;
}

TEST(WorkerGroupTest, ExitEventsCarryCodeAttemptAndHooksSeeEveryGroup) {
  boost::asio::io_context io;
  std::vector<WorkerExit> exits;
  std::vector<pid_t> spawned, reaped;
  WorkerGroup group(
      io, [&](const WorkerExit& e) { exits.push_back(e); }, [&](pid_t p) { spawned.push_back(p); },
      [&](pid_t p) { reaped.push_back(p); });
  WorkerSpec a = Shell("exit 0", 0);
  WorkerSpec b = Shell("echo oops >&2; exit 3", 1);
  b.attempt = 2;
  ASSERT_TRUE(group.Start({a, b}).ok());
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(10));
  ASSERT_EQ(exits.size(), 2u);
  ASSERT_TRUE(group.drained());
  const WorkerExit& failed = exits[0].rank == 1 ? exits[0] : exits[1];
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.signal, 0);
  EXPECT_EQ(failed.attempt, 2);
  EXPECT_EQ(failed.ExitStatus(), 3);
  EXPECT_EQ(failed.Describe(), "exited with code 3");
  EXPECT_EQ(failed.stderr_tail, (std::deque<std::string>{"oops"}));
  std::sort(spawned.begin(), spawned.end());
  std::sort(reaped.begin(), reaped.end());
  EXPECT_EQ(spawned, reaped);
  EXPECT_EQ(spawned.size(), 2u);
}

TEST(WorkerGroupTest, RedirectedStreamsGoToFilesOnly) {
  boost::asio::io_context io;
  WorkerGroup group(io, [](const WorkerExit&) {});
  WorkerSpec spec = Shell("echo out1; printf 'out2'; echo err1 >&2");
  spec.stdout_file = ::testing::TempDir() + "wg_stdout.log";
  spec.stderr_file = ::testing::TempDir() + "wg_stderr.log";
  std::remove(spec.stdout_file.c_str());  // Appended to: nothing of an earlier run of the test.
  std::remove(spec.stderr_file.c_str());
  spec.stdout_console = false;
  ASSERT_TRUE(group.Start({spec}).ok());
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(group.drained());
  // A last line without newline is completed when the pipe closes.
  EXPECT_EQ(ReadFile(spec.stdout_file), "out1\nout2\n");
  EXPECT_EQ(ReadFile(spec.stderr_file), "err1\n");
}

// A later round of the same attempt (a round of nodes joining or leaving keeps the restart count,
// so its workers get the same attempt_<n>/<local_rank>/ files) appends to the earlier round's
// output instead of truncating it (`dgt logs` lost node1's first round).
TEST(WorkerGroupTest, ALaterRoundOfTheSameAttemptAppendsToItsFiles) {
  const std::string out = ::testing::TempDir() + "wg_rounds_stdout.log";
  const std::string err = ::testing::TempDir() + "wg_rounds_stderr.log";
  std::remove(out.c_str());
  std::remove(err.c_str());
  for (const char* round : {"1", "2"}) {
    boost::asio::io_context io;
    WorkerGroup group(io, [](const WorkerExit&) {});
    WorkerSpec spec = Shell(std::string("echo round ") + round + "; echo err " + round + " >&2");
    spec.stdout_file = out;
    spec.stderr_file = err;
    spec.stdout_console = false;
    spec.stderr_console = false;
    ASSERT_TRUE(group.Start({spec}).ok());
    group.OnDrained([&] { io.stop(); });
    io.run_for(std::chrono::seconds(10));
    ASSERT_TRUE(group.drained());
  }
  EXPECT_EQ(ReadFile(out), "round 1\nround 2\n");
  EXPECT_EQ(ReadFile(err), "err 1\nerr 2\n");
}

// Each worker leads its own session and process group, as torchrun 2.x's workers
// (start_new_session=True): with autogroup scheduling, workers sharing the agent's session would
// share one CPU share.
TEST(WorkerGroupTest, EachWorkerLeadsItsOwnSessionAndProcessGroup) {
  boost::asio::io_context io;
  WorkerGroup group(io, [](const WorkerExit&) {});
  WorkerSpec spec = Shell("echo $$ $(cut -d' ' -f5,6 /proc/$$/stat)");
  spec.stdout_file = ::testing::TempDir() + "wg_session.log";
  std::remove(spec.stdout_file.c_str());
  spec.stdout_console = false;
  ASSERT_TRUE(group.Start({spec}).ok());
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(group.drained());
  std::istringstream fields(ReadFile(spec.stdout_file));
  pid_t pid = 0, pgid = 0, sid = 0;
  fields >> pid >> pgid >> sid;
  ASSERT_GT(pid, 0);
  EXPECT_EQ(pgid, pid);
  EXPECT_EQ(sid, pid);
  EXPECT_NE(sid, ::getsid(0));
}

TEST(WorkerGroupTest, StopSendsTheSignalThenSigkillAfterGrace) {
  boost::asio::io_context io;
  std::vector<WorkerExit> exits;
  WorkerGroup group(io, [&](const WorkerExit& e) { exits.push_back(e); });
  // One worker ignores SIGINT, the other dies of it.
  ASSERT_TRUE(
      group.Start({Shell("trap '' INT; echo ready; sleep 30", 0), Shell("echo ready; sleep 30", 1)})
          .ok());
  boost::asio::steady_timer later(io);
  later.expires_after(std::chrono::milliseconds(300));  // Let the shells install their traps.
  later.async_wait([&](boost::system::error_code) { group.Stop(absl::Milliseconds(300), SIGINT); });
  auto start = std::chrono::steady_clock::now();
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(10));
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(group.alive(), 0);
  std::map<int, int> signal_by_rank;
  for (const WorkerExit& e : exits) signal_by_rank[e.rank] = e.signal;
  EXPECT_EQ(signal_by_rank[0], SIGKILL);
  EXPECT_EQ(signal_by_rank[1], SIGINT);
  EXPECT_GE(elapsed, std::chrono::milliseconds(550));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(WorkerGroupTest, MissingExecutableIsNotFound) {
  boost::asio::io_context io;
  WorkerGroup group(io, [](const WorkerExit&) {});
  WorkerSpec spec = Shell("");
  spec.argv = {"/nonexistent/python"};
  absl::Status s = group.Start({spec});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "'/nonexistent/python' is not an executable file");
}

}  // namespace
}  // namespace dgt::agent

#include "tests/agent/fake_process_launcher.h"

namespace dgt::agent {
namespace {

WorkerSpec Fake(int rank, int attempt = 0) {
  WorkerSpec spec;
  spec.rank = rank;
  spec.local_rank = rank;
  spec.attempt = attempt;
  spec.argv = {"python3", "-u", "train.py"};
  return spec;
}

TEST(WorkerGroupFakeTest, StopIsSignalThenSigkillAfterGraceThenLeftoversKilled) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  std::vector<WorkerExit> exits;
  WorkerGroup group(
      io, [&](const WorkerExit& e) { exits.push_back(e); }, nullptr, nullptr, &launcher);
  ASSERT_TRUE(group.Start({Fake(0), Fake(1)}).ok());
  const pid_t p0 = launcher.launch_order()[0], p1 = launcher.launch_order()[1];
  launcher.IgnoreSignal(p1, SIGTERM);
  group.Stop(absl::Milliseconds(100));
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(5));
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].rank, 0);
  EXPECT_EQ(exits[0].signal, SIGTERM);
  EXPECT_EQ(exits[1].rank, 1);
  EXPECT_EQ(exits[1].signal, SIGKILL);
  EXPECT_EQ(exits[1].ExitStatus(), 128 + SIGKILL);
  // After each exit, what is left of the group gets SIGKILL.
  EXPECT_EQ(launcher.process(p0).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_EQ(launcher.process(p1).signals, (std::vector<int>{SIGTERM, SIGKILL, SIGKILL}));
}

TEST(WorkerGroupFakeTest, NotifySignalLeavesWorkersRunning) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  WorkerGroup group(
      io, [](const WorkerExit&) {}, nullptr, nullptr, &launcher);
  ASSERT_TRUE(group.Start({Fake(0), Fake(1)}).ok());
  for (pid_t p : launcher.launch_order()) launcher.IgnoreSignal(p, SIGUSR1);
  group.Signal(SIGUSR1);
  io.run_for(std::chrono::milliseconds(20));
  EXPECT_EQ(group.alive(), 2);
  for (pid_t p : launcher.launch_order()) {
    EXPECT_EQ(launcher.process(p).signals, (std::vector<int>{SIGUSR1}));
  }
}

TEST(WorkerGroupFakeTest, ReplacingOneRankLeavesTheOthersUntouched) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  std::vector<WorkerExit> exits;
  std::vector<pid_t> spawned;
  WorkerGroup* group_ptr = nullptr;
  WorkerGroup group(
      io,
      [&](const WorkerExit& e) {
        exits.push_back(e);
        if (e.attempt == 0) {
          ASSERT_TRUE(group_ptr->StartOne(Fake(e.rank, 1)).ok());
        }
        io.stop();
      },
      [&](pid_t p) { spawned.push_back(p); }, nullptr, &launcher);
  group_ptr = &group;
  ASSERT_TRUE(group.Start({Fake(0), Fake(1), Fake(2)}).ok());
  launcher.ExitWithCode(launcher.launch_order()[1], 3);
  io.run_for(std::chrono::seconds(5));
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 3);
  EXPECT_EQ(exits[0].rank, 1);
  ASSERT_EQ(launcher.launch_order().size(), 4u);
  EXPECT_EQ(spawned, launcher.launch_order());
  EXPECT_EQ(group.alive(), 3);
  EXPECT_TRUE(launcher.process(launcher.launch_order()[0]).signals.empty());
  EXPECT_TRUE(launcher.process(launcher.launch_order()[2]).signals.empty());
}

TEST(WorkerGroupFakeTest, LinesAreJoinedAcrossWritesAndRoutedToFiles) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  WorkerGroup group(
      io, [](const WorkerExit&) {}, nullptr, nullptr, &launcher);
  WorkerSpec spec = Fake(0);
  spec.stdout_file = ::testing::TempDir() + "wg_fake_stdout.log";
  std::remove(spec.stdout_file.c_str());
  spec.stdout_console = false;
  ASSERT_TRUE(group.Start({spec}).ok());
  const pid_t p = launcher.launch_order()[0];
  launcher.Write(p, 1, "hel");
  io.run_for(std::chrono::milliseconds(20));
  launcher.Write(p, 1, "lo\nwor");
  io.run_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ReadFile(spec.stdout_file), "hello\n");  // Only complete lines so far.
  launcher.Write(p, 1, "ld\n");
  launcher.ExitWithCode(p, 0);
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(5));
  EXPECT_TRUE(group.drained());
  EXPECT_EQ(ReadFile(spec.stdout_file), "hello\nworld\n");
}

// What the console got so far (a non-blocking pipe's read end).
std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// torchrun 2.13 --duplicate-stdout-filters: the matching lines of every worker holding the
// filtered log go there, with the worker's prefix (a template's, when given); '\r' segments
// count as lines, and so does an unterminated last line.
TEST(WorkerGroupFakeTest, MatchingLinesAreDuplicatedToTheFilteredLog) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  WorkerGroup group(
      io, [](const WorkerExit&) {}, nullptr, nullptr, &launcher);
  int console[2];
  ASSERT_EQ(::pipe2(console, O_NONBLOCK | O_CLOEXEC), 0);
  group.SetConsole(console[1], console[1]);
  const std::string path = ::testing::TempDir() + "wg_filtered_stdout.log";
  auto filtered = FilteredLog::Open(path, {"loss", "acc"});
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  WorkerSpec a = Fake(0);
  a.prefix = "<0> ";
  a.stdout_filtered = *filtered;
  WorkerSpec b = Fake(1);
  b.stdout_filtered = *filtered;
  WorkerSpec c = Fake(2);  // Not tee'd: its lines stay out of the file.
  ASSERT_TRUE(group.Start({a, b, c}).ok());
  filtered->reset();  // The workers hold it now.
  const std::vector<pid_t> pids = launcher.launch_order();
  launcher.Write(pids[0], 1, "step 1 loss=0.5\nnoise\n");
  io.run_for(std::chrono::milliseconds(20));
  launcher.Write(pids[1], 1, "epoch acc 0.9\r");
  io.run_for(std::chrono::milliseconds(20));
  launcher.Write(pids[1], 1, "x\n");
  launcher.Write(pids[1], 2, "loss on stderr\n");  // Another stream, another log.
  launcher.Write(pids[2], 1, "loss of rank 2\n");
  launcher.Write(pids[0], 1, "last loss");
  io.run_for(std::chrono::milliseconds(20));
  for (pid_t p : pids) launcher.ExitWithCode(p, 0);
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(group.drained());
  EXPECT_EQ(ReadFile(path), "<0> step 1 loss=0.5\n[rank1]: epoch acc 0.9\n<0> last loss\n");
  const std::string shown = Drain(console[0]);
  EXPECT_NE(shown.find("<0> noise\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("[rank2]: loss of rank 2\n"), std::string::npos) << shown;
  ::close(console[0]);
  ::close(console[1]);
}

TEST(FilteredLogTest, OpenNamesThePathOnError) {
  auto log = FilteredLog::Open("/nonexistent-dir/filtered_stdout.log", {"x"});
  EXPECT_EQ(log.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(log.status().message().find("open /nonexistent-dir/filtered_stdout.log"),
            std::string::npos)
      << log.status();
}

// A progress bar (tqdm writes "\r" + the bar, and a newline only at the end) shows as it is
// drawn, prefixed, each state in one piece; not only at the next newline.
TEST(WorkerGroupFakeTest, CarriageReturnSegmentsReachTheConsoleAsTheyCome) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  std::vector<WorkerExit> exits;
  WorkerGroup group(
      io, [&](const WorkerExit& e) { exits.push_back(e); }, nullptr, nullptr, &launcher);
  int console[2];
  ASSERT_EQ(::pipe2(console, O_NONBLOCK | O_CLOEXEC), 0);
  group.SetConsole(console[1], console[1]);
  WorkerSpec spec = Fake(3);
  spec.stderr_file = ::testing::TempDir() + "wg_fake_bar.log";
  std::remove(spec.stderr_file.c_str());
  ASSERT_TRUE(group.Start({spec}).ok());
  const pid_t p = launcher.launch_order()[0];
  auto step = [&](const std::string& written) {
    launcher.Write(p, 2, written);
    io.run_for(std::chrono::milliseconds(20));
    return Drain(console[0]);
  };
  EXPECT_EQ(step("\r  0%|"), "[rank3]:   0%|\r");
  EXPECT_EQ(step("\r 50%|#"), "[rank3]:  50%|#\r");
  EXPECT_EQ(step("#"), "[rank3]:  50%|##\r");  // Grown: redrawn whole, never a piece.
  EXPECT_EQ(step("\r100%|###|\n"), "[rank3]: 100%|###|\n");
  EXPECT_EQ(step("no newline yet"), "");  // Plain lines still wait for their newline.
  EXPECT_EQ(step(", now\n"), "[rank3]: no newline yet, now\n");
  EXPECT_EQ(step("step 1\r"), "[rank3]: step 1\r");  // The other style: "text\r".
  EXPECT_EQ(step("step 2\r"), "[rank3]: step 2\r");
  EXPECT_EQ(step("\n"), "[rank3]: step 2\n");               // "\r\n": a line end after all.
  EXPECT_EQ(step("a\r\nb\n"), "[rank3]: a\n[rank3]: b\n");  // "\r\n" ends a line.
  launcher.ExitWithCode(p, 1);
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(5));
  EXPECT_TRUE(group.drained());
  // The file gets the bytes as written; the failure summary's tail only lines.
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].stderr_tail,
            (std::deque<std::string>{"100%|###|", "no newline yet, now", "step 2", "a", "b"}));
  EXPECT_EQ(ReadFile(spec.stderr_file),
            "\r  0%|\r 50%|##\r100%|###|\nno newline yet, now\nstep 1\rstep 2\r\na\r\nb\n");
  ::close(console[0]);
  ::close(console[1]);
}

TEST(WorkerGroupFakeTest, LaunchErrorLeavesNothingRunning) {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  WorkerGroup group(
      io, [](const WorkerExit&) {}, nullptr, nullptr, &launcher);
  WorkerSpec bad = Fake(1);
  bad.argv = {"missing"};
  absl::Status s = group.Start({Fake(0), bad});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "'missing' was not found in PATH");
  const pid_t first = launcher.launch_order()[0];
  ASSERT_FALSE(launcher.process(first).signals.empty());
  EXPECT_EQ(launcher.process(first).signals[0], SIGKILL);
  group.OnDrained([&] { io.stop(); });
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(group.alive(), 0);
}

}  // namespace
}  // namespace dgt::agent
