// Warm standbys of a WorkerGroup (--standby-workers, docs/RECOVERY.md "Warm standbys"): the
// standby's command and environment, the ready/activation protocol on its channel, the fallback
// to a fresh spawn, stop, and one real /bin/sh standby through ForkExecLauncher. Every run of the
// event loop is bounded.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "agent/workers/worker_group.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/agent/fake_process_launcher.h"
#include "tests/testutil/log_capture.h"

namespace dgt::agent {
namespace {

using ::dgt::testing::LogCapture;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `io` until `done` holds, at most `limit`.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& done,
              std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return done();
}

WorkerSpec Rank(int rank, int attempt = 0) {
  WorkerSpec spec;
  spec.rank = rank;
  spec.local_rank = rank;
  spec.attempt = attempt;
  spec.argv = {"python3", "-u", "train.py", "--lr=1", absl::StrCat("--local_rank=", rank)};
  spec.env = {
      "PATH=/usr/bin:/bin",
      absl::StrCat("RANK=", rank),
      absl::StrCat("LOCAL_RANK=", rank),
      "WORLD_SIZE=4",
      absl::StrCat("TORCHELASTIC_RESTART_COUNT=", attempt),
      absl::StrCat("TORCHELASTIC_ERROR_FILE=/logs/attempt_", attempt, "/", rank, "/error.json")};
  return spec;
}

// What the console got so far (a non-blocking pipe's read end).
std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct Fixture {
  boost::asio::io_context io;
  FakeProcessLauncher launcher;
  std::vector<WorkerExit> exits;
  std::vector<pid_t> spawned, reaped;
  WorkerGroup group{io, [this](const WorkerExit& e) { exits.push_back(e); },
                    [this](pid_t p) { spawned.push_back(p); },
                    [this](pid_t p) { reaped.push_back(p); }, &launcher};
  pid_t launched(size_t i) const { return launcher.launch_order().at(i); }
  void Ready(pid_t p) {
    launcher.WriteChannel(p, "ready\n");
    ASSERT_TRUE(RunUntil(io, [&] { return group.standbys_ready() >= 1; }));
  }
};

TEST(StandbyTest, StandbysRunTheFirstWorkersCommandWithoutItsRank) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(2).ok());
  ASSERT_EQ(f.launcher.launch_order().size(), 3u);
  EXPECT_FALSE(f.launcher.process(f.launched(0)).request.standby_channel);
  for (size_t i : {1, 2}) {
    const LaunchRequest& r = f.launcher.process(f.launched(i)).request;
    EXPECT_TRUE(r.standby_channel);
    EXPECT_EQ(r.argv, (std::vector<std::string>{"python3", "-u", "train.py", "--lr=1"}));
    EXPECT_EQ(r.env, (std::vector<std::string>{"PATH=/usr/bin:/bin", "WORLD_SIZE=4",
                                               "DGT_STANDBY=1", "DGT_STANDBY_FD=3"}));
  }
  EXPECT_EQ(f.group.alive(), 1);  // Standbys are not workers.
  EXPECT_EQ(f.group.standbys(), 2);
  EXPECT_EQ(f.group.standbys_ready(), 0);
  EXPECT_EQ(f.spawned.size(), 3u);  // The watchdog knows them.
  // Asking for the same number again starts nothing more.
  ASSERT_TRUE(f.group.StartStandbys(2).ok());
  EXPECT_EQ(f.launcher.launch_order().size(), 3u);
}

// Many standbys start kStandbyBatch per turn of the event loop, so that a stop signal handled
// between batches (StopStandbys) starts no more: dgt-run answers SIGTERM at once.
TEST(StandbyTest, StandbysStartInBatchesAndAStopEndsTheStarting) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(kStandbyBatch + 8).ok());
  EXPECT_EQ(f.launcher.launch_order().size(), 1u + kStandbyBatch);  // The first batch only.
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.group.standbys() == kStandbyBatch + 8; }));
  EXPECT_EQ(f.launcher.launch_order().size(), 1u + kStandbyBatch + 8);

  Fixture g;
  ASSERT_TRUE(g.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(g.group.StartStandbys(3 * kStandbyBatch).ok());
  EXPECT_EQ(g.launcher.launch_order().size(), 1u + kStandbyBatch);
  g.group.StopStandbys();  // As Stop on SIGTERM.
  RunUntil(
      g.io, [] { return false; }, std::chrono::milliseconds(30));
  EXPECT_EQ(g.launcher.launch_order().size(), 1u + kStandbyBatch);
  EXPECT_EQ(g.group.standbys(), 0);
}

// `--no-python /bin/sh -c ...` never waits in `import dgt.recovery`: a standby would run the
// whole program (its side effects) without a rank, so none starts.
TEST(StandbyTest, ACommandThatIsNotPythonGetsNoStandbys) {
  Fixture f;
  WorkerSpec sh = Rank(0);
  sh.argv = {"/bin/sh", "-c", "echo run >> side.txt"};
  ASSERT_TRUE(f.group.Start({sh}).ok());
  const absl::Status s = f.group.StartStandbys(3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "none started: the command '/bin/sh' is not a Python interpreter (a standby must be a "
            "Python script that imports dgt.recovery, docs/RECOVERY.md \"Warm standbys\"; with "
            "--no-python it would run the whole program without a rank)");
  EXPECT_EQ(f.launcher.launch_order().size(), 1u);
  EXPECT_EQ(f.group.standbys(), 0);
  // Interpreters by any path and version are Python.
  for (const char* python : {"python", "/usr/bin/python3", "/opt/venv/bin/python3.11"}) {
    Fixture g;
    WorkerSpec spec = Rank(0);
    spec.argv[0] = python;
    ASSERT_TRUE(g.group.Start({spec}).ok());
    EXPECT_TRUE(g.group.StartStandbys(1).ok()) << python;
    EXPECT_EQ(g.launcher.launch_order().size(), 2u) << python;
  }
  for (const char* other : {"python3-config", "/usr/bin/pythonx", "mypython3"}) {
    Fixture g;
    WorkerSpec spec = Rank(0);
    spec.argv[0] = other;
    ASSERT_TRUE(g.group.Start({spec}).ok());
    EXPECT_EQ(g.group.StartStandbys(1).code(), absl::StatusCode::kFailedPrecondition) << other;
  }
}

TEST(StandbyTest, NoStandbysBeforeAWorkerStarted) {
  Fixture f;
  EXPECT_EQ(f.group.StartStandbys(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(f.group.StartStandbys(0).ok());
  EXPECT_TRUE(f.launcher.launch_order().empty());
}

TEST(StandbyTest, AReadyStandbyTakesTheRankAndAnotherIsStarted) {
  Fixture f;
  int console[2];
  ASSERT_EQ(::pipe2(console, O_NONBLOCK | O_CLOEXEC), 0);
  f.group.SetConsole(console[1], console[1]);
  ASSERT_TRUE(f.group.Start({Rank(0), Rank(1)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t standby = f.launched(2);
  f.launcher.Write(standby, 2, "importing torch\n");
  f.Ready(standby);
  // Rank 1 dies; its replacement is the standby.
  f.launcher.ExitWithCode(f.launched(1), 1);
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.exits.size() == 1; }));
  WorkerSpec spec = Rank(1, /*attempt=*/1);
  spec.stdout_file = ::testing::TempDir() + "standby_rank1_stdout.log";
  // What an earlier round of attempt 1 wrote there stays (the file is appended to).
  std::ofstream(spec.stdout_file, std::ios::trunc) << "earlier round\n";
  absl::StatusOr<pid_t> pid = f.group.StartReplacement(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, standby);
  EXPECT_EQ(f.group.alive(), 2);
  // The activation: the rank's whole environment and the arguments the standby lacks.
  const std::string line = f.launcher.ReadChannel(standby);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  nlohmann::json expected = {{"env",
                              {{"PATH", "/usr/bin:/bin"},
                               {"RANK", "1"},
                               {"LOCAL_RANK", "1"},
                               {"WORLD_SIZE", "4"},
                               {"TORCHELASTIC_RESTART_COUNT", "1"},
                               {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_1/1/error.json"}}},
                             {"argv_append", {"--local_rank=1"}}};
  EXPECT_EQ(nlohmann::json::parse(line), expected);
  // A new standby replaces the one that was taken (from the event loop).
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.launcher.launch_order().size() == 4; }));
  EXPECT_TRUE(f.launcher.process(f.launched(3)).request.standby_channel);
  EXPECT_EQ(f.group.standbys(), 1);
  EXPECT_EQ(f.group.standbys_ready(), 0);
  // From now on its output is rank 1's, on the console and in the rank's file.
  f.launcher.Write(standby, 1, "step 41\n");
  f.launcher.ExitWithCode(standby, 3);
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.exits.size() == 2; }));
  EXPECT_EQ(f.exits[1].rank, 1);
  EXPECT_EQ(f.exits[1].local_rank, 1);
  EXPECT_EQ(f.exits[1].attempt, 1);
  EXPECT_EQ(f.exits[1].pid, standby);
  EXPECT_EQ(f.exits[1].exit_code, 3);
  RunUntil(
      f.io, [] { return false; }, std::chrono::milliseconds(30));
  EXPECT_EQ(Drain(console[0]), "[standby0]: importing torch\n[rank1]: step 41\n");
  EXPECT_EQ(ReadFile(spec.stdout_file), "earlier round\nstep 41\n");
  ::close(console[0]);
  ::close(console[1]);
}

// An environment entry that is not UTF-8 (JSON strings are) goes base64-encoded, key and
// value, so that the standby gets the exact bytes a fresh replacement would.
TEST(StandbyTest, EnvBytesThatAreNotUtf8ReachTheStandbyBase64Encoded) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t standby = f.launched(1);
  f.Ready(standby);
  WorkerSpec spec = Rank(0, 1);
  spec.env = {"RANK=0", "NAME=caf\xe9", "K\xe9=v", "UTF8=caf\xc3\xa9"};
  absl::StatusOr<pid_t> pid = f.group.ActivateStandby(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const nlohmann::json expected = {
      {"env", {{"RANK", "0"}, {"UTF8", "caf\xc3\xa9"}}},
      {"argv_append", {"--local_rank=0"}},
      {"env_b64", nlohmann::json::array({nlohmann::json::array({"TkFNRQ==", "Y2Fm6Q=="}),
                                         nlohmann::json::array({"S+k=", "dg=="})})}};
  EXPECT_EQ(nlohmann::json::parse(f.launcher.ReadChannel(standby)), expected);
}

TEST(StandbyTest, WithoutAReadyStandbyTheReplacementIsAFreshProcess) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());  // Started, never ready.
  EXPECT_EQ(f.group.ActivateStandby(Rank(0, 1)).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<pid_t> pid = f.group.StartReplacement(Rank(0, 1));
  ASSERT_TRUE(pid.ok());
  ASSERT_EQ(f.launcher.launch_order().size(), 3u);
  EXPECT_EQ(*pid, f.launched(2));
  EXPECT_FALSE(f.launcher.process(*pid).request.standby_channel);
  EXPECT_EQ(f.launcher.process(*pid).request.argv, Rank(0, 1).argv);
  EXPECT_EQ(f.group.standbys(), 1);
  EXPECT_EQ(f.group.alive(), 2);
}

// --virtual-local-rank gives each rank its own CUDA_VISIBLE_DEVICES; a standby started with
// rank 0's may have initialized CUDA with it, so it does not become another rank.
TEST(StandbyTest, ARankWithOtherVisibleDevicesGetsAFreshProcess) {
  Fixture f;
  WorkerSpec rank0 = Rank(0);
  rank0.env.emplace_back("CUDA_VISIBLE_DEVICES=0");
  ASSERT_TRUE(f.group.Start({rank0}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t standby = f.launched(1);
  f.Ready(standby);
  WorkerSpec rank1 = Rank(1, 1);
  rank1.env.emplace_back("CUDA_VISIBLE_DEVICES=1");
  EXPECT_EQ(f.group.ActivateStandby(rank1).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<pid_t> pid = f.group.StartReplacement(rank1);
  ASSERT_TRUE(pid.ok());
  EXPECT_NE(*pid, standby);
  EXPECT_FALSE(f.launcher.process(*pid).request.standby_channel);
  EXPECT_EQ(f.group.standbys_ready(), 1);  // Still there for a rank with the same devices.
  WorkerSpec again = Rank(0, 1);
  again.env.emplace_back("CUDA_VISIBLE_DEVICES=0");
  absl::StatusOr<pid_t> taken = f.group.ActivateStandby(again);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, standby);
}

TEST(StandbyTest, AStandbyWhoseChannelBrokeIsKilledAndAFreshProcessStarted) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t standby = f.launched(1);
  f.Ready(standby);
  f.launcher.CloseChannel(standby);
  EXPECT_EQ(f.group.ActivateStandby(Rank(0, 1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(f.launcher.process(standby).signals, (std::vector<int>{SIGKILL}));
  absl::StatusOr<pid_t> pid = f.group.StartReplacement(Rank(0, 1));
  ASSERT_TRUE(pid.ok());
  EXPECT_FALSE(f.launcher.process(*pid).request.standby_channel);
  EXPECT_TRUE(f.exits.empty());  // The standby's death is no worker's exit.
}

TEST(StandbyTest, ACommandThatIsNotAStandbyTurnsStandbysOff) {
  LogCapture log;
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(2).ok());
  // The script never reaches `import dgt.recovery`: it fails on its own, before ready. Its
  // stderr goes nowhere else (-r 3): the warning shows its last lines.
  const pid_t standby = f.launched(1);
  f.launcher.Write(standby, 2, "Traceback (most recent call last):\n");
  f.launcher.Write(standby, 2, "ModuleNotFoundError: No module named 'dgt'\n");
  f.launcher.ExitWithCode(standby, 1);
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.group.standbys() == 0; }));
  ASSERT_TRUE(RunUntil(f.io, [&] { return log.text().find("warning") != std::string::npos; }));
  EXPECT_EQ(log.text(),
            absl::StrCat("warning dgt-run: standby pid ", standby,
                         " exited with code 1 before it reported ready; no more standbys for "
                         "this round (a standby must be a Python script that imports "
                         "dgt.recovery before it reads its rank, docs/RECOVERY.md \"Warm "
                         "standbys\"); its last stderr lines:\n  Traceback (most recent call "
                         "last):\n  ModuleNotFoundError: No module named 'dgt'\n"));
  EXPECT_EQ(f.launcher.launch_order().size(), 3u);  // None started again.
  EXPECT_EQ(f.launcher.process(f.launched(2)).signals.front(), SIGKILL);
  EXPECT_TRUE(f.exits.empty());
  EXPECT_EQ(f.group.alive(), 1);
  ASSERT_TRUE(f.group.StartStandbys(2).ok());  // Off for good.
  EXPECT_EQ(f.launcher.launch_order().size(), 3u);
}

// Code 0 before ready: the script ran as a whole without a rank; the warning says so.
TEST(StandbyTest, AStandbyThatRanTheScriptWithoutARankIsNamed) {
  LogCapture log;
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t standby = f.launched(1);
  f.launcher.ExitWithCode(standby, 0);
  ASSERT_TRUE(RunUntil(f.io, [&] { return log.text().find("warning") != std::string::npos; }));
  EXPECT_EQ(log.text(),
            absl::StrCat("warning dgt-run: standby pid ", standby,
                         " exited with code 0 before it reported ready (it ran the script "
                         "without a rank); no more standbys for this round (a standby must be "
                         "a Python script that imports dgt.recovery before it reads its rank, "
                         "docs/RECOVERY.md \"Warm standbys\") (it wrote nothing on stderr)\n"));
  EXPECT_EQ(f.launcher.launch_order().size(), 2u);
}

// Killed from outside before ready (SIGKILL, the OOM killer): not the script's fault, so it is
// replaced like a ready standby that died, at most --standby-workers times.
TEST(StandbyTest, AStandbyKilledBeforeReadyIsReplaced) {
  LogCapture log;
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t first = f.launched(1);
  f.launcher.SignalGroup(first, SIGKILL);
  ASSERT_TRUE(RunUntil(f.io, [&] { return f.launcher.launch_order().size() == 3; }));
  EXPECT_TRUE(f.launcher.process(f.launched(2)).request.standby_channel);
  EXPECT_EQ(f.group.standbys(), 1);
  EXPECT_EQ(log.text(), absl::StrCat("warning dgt-run: standby pid ", first,
                                     " was killed by signal 9 before it reported ready; starting "
                                     "another\n"));
  f.Ready(f.launched(2));  // The replacement works as any standby.
  EXPECT_EQ(f.group.standbys_ready(), 1);
}

TEST(StandbyTest, AReadyStandbyThatDiesIsReplacedAtMostCountTimes) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  for (size_t i = 1; i <= 2; ++i) {
    const pid_t standby = f.launched(i);
    f.Ready(standby);
    f.launcher.SignalGroup(standby, SIGKILL);  // The OOM killer, say.
    ASSERT_TRUE(RunUntil(f.io, [&] { return f.group.standbys_ready() == 0; }));
    RunUntil(
        f.io, [] { return false; }, std::chrono::milliseconds(20));
  }
  // The first death was replaced (1 = --standby-workers), the second not.
  EXPECT_EQ(f.launcher.launch_order().size(), 3u);
  EXPECT_EQ(f.group.standbys(), 0);
  EXPECT_TRUE(f.exits.empty());
}

TEST(StandbyTest, StopKillsStandbysAndTheGroupDrainsWithoutThem) {
  Fixture f;
  ASSERT_TRUE(f.group.Start({Rank(0)}).ok());
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  const pid_t worker = f.launched(0), standby = f.launched(1);
  f.Ready(standby);
  f.launcher.IgnoreSignal(worker, SIGUSR1);
  f.group.Signal(SIGUSR1);  // Forwarded signals are the workers'.
  EXPECT_TRUE(f.launcher.process(standby).signals.empty());
  f.group.Stop(absl::Seconds(5));
  bool drained = false;
  f.group.OnDrained([&] { drained = true; });
  ASSERT_TRUE(RunUntil(f.io, [&] { return drained && f.group.standbys() == 0; }));
  EXPECT_EQ(f.launcher.process(standby).signals.front(), SIGKILL);
  EXPECT_EQ(f.launcher.process(worker).signals, (std::vector<int>{SIGUSR1, SIGTERM, SIGKILL}));
  ASSERT_EQ(f.exits.size(), 1u);
  EXPECT_EQ(f.exits[0].pid, worker);
  // Every process the watchdog was told of was reaped, the standby's included.
  std::sort(f.spawned.begin(), f.spawned.end());
  std::sort(f.reaped.begin(), f.reaped.end());
  EXPECT_EQ(f.spawned, f.reaped);
  // Stopped standbys are not started again.
  ASSERT_TRUE(f.group.StartStandbys(1).ok());
  EXPECT_EQ(f.launcher.launch_order().size(), 2u);
}

// The real launcher: a /bin/sh standby finds its channel at descriptor 3 and DGT_STANDBY=1 in its
// environment, reports ready, and runs as the rank it is handed (its line goes to the rank's
// log file).
TEST(StandbyTest, ForkExecStandbyGetsItsChannelAsDescriptor3) {
  boost::asio::io_context io;
  std::vector<WorkerExit> exits;
  WorkerGroup group(io, [&](const WorkerExit& e) { exits.push_back(e); });
  // Standbys run only under a Python interpreter's name: /bin/sh as "python3".
  const std::string python3 = ::testing::TempDir() + "standby_fork_exec_bin/python3";
  ::mkdir((::testing::TempDir() + "standby_fork_exec_bin").c_str(), 0755);
  ::unlink(python3.c_str());
  ASSERT_EQ(::symlink("/bin/sh", python3.c_str()), 0);
  WorkerSpec first;
  first.argv = {python3, "-c",
                "[ \"$DGT_STANDBY\" = 1 ] || exit 0; echo ready >&3; read -r line <&3; "
                "echo \"$DGT_STANDBY_FD $line\"; exit 7"};
  first.env = {"PATH=/usr/bin:/bin", "RANK=0"};
  ASSERT_TRUE(group.Start({first}).ok());
  ASSERT_TRUE(RunUntil(io, [&] { return exits.size() == 1; }));
  ASSERT_TRUE(group.StartStandbys(1).ok());
  ASSERT_TRUE(RunUntil(io, [&] { return group.standbys_ready() == 1; }));
  WorkerSpec rank = first;
  rank.rank = 5;
  rank.env = {"PATH=/usr/bin:/bin", "RANK=5"};
  rank.stdout_file = ::testing::TempDir() + "standby_fork_exec_stdout.log";
  ::unlink(rank.stdout_file.c_str());  // Appended to: nothing of an earlier run of the test.
  absl::StatusOr<pid_t> pid = group.ActivateStandby(rank);
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(RunUntil(io, [&] { return exits.size() == 2; }));
  EXPECT_EQ(exits[1].pid, *pid);
  EXPECT_EQ(exits[1].rank, 5);
  EXPECT_EQ(exits[1].exit_code, 7);
  group.StopStandbys();
  group.OnDrained([&] { io.stop(); });
  io.restart();
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(ReadFile(rank.stdout_file),
            "3 {\"argv_append\":[],\"env\":{\"PATH\":\"/usr/bin:/bin\",\"RANK\":\"5\"}}\n");
}

}  // namespace
}  // namespace dgt::agent
