// The fork server of a WorkerGroup (--fork-server, docs/RECOVERY.md "Fork server") with real
// processes: Debian's /usr/bin/python3 runs python/dgt/forkserver.py with
// DGT_FORKSERVER_IMPORTS=json (no torch needed) and forks replacements of a small script. Checks
// the exit code and the signal the agent reports, the rank's output prefix and log files, a
// server killed while its child runs, one that never gets ready, and that nothing is left once
// the group is gone. Every wait has a deadline.
#include "agent/workers/fork_server.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/workers/worker_group.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testutil/log_capture.h"

namespace dgt::agent {
namespace {

using ::dgt::testing::LogCapture;

constexpr char kPython[] = "/usr/bin/python3";

// Python's start and `import json` on a loaded machine: generous, never waited out on success.
constexpr std::chrono::seconds kLimit(60);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& done,
              std::chrono::milliseconds limit = kLimit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return done();
}

// Gone: no such process, or a zombie nobody reaps in this container.
bool Gone(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && text.size() > paren + 2 && text[paren + 2] == 'Z';
}

bool WaitGone(pid_t pid) {
  const auto end = std::chrono::steady_clock::now() + kLimit;
  while (!Gone(pid) && std::chrono::steady_clock::now() < end) ::usleep(10000);
  return Gone(pid);
}

// What the replacements run: prints its rank, argv and whether its parent is the fork server,
// then does what argv[1] says.
constexpr char kScript[] = R"(import os, signal, sys, time
parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\0")
print("rank", os.environ["RANK"], sys.argv[1:], "forked" if b"dgt.forkserver" in parent else "fresh")
print("stderr of", os.environ["RANK"], os.environ.get("DGT_FORKSERVER_FD", "-"), file=sys.stderr)
if sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
if sys.argv[1] == "wait":
    open(sys.argv[2], "w").close()
    time.sleep(600)
)";

class ForkServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt_fork_server_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    script_ = dir_ + "/script.py";
    std::ofstream(script_) << kScript;
    ASSERT_EQ(::pipe2(console_, O_CLOEXEC | O_NONBLOCK), 0);
    group_->SetConsole(console_[1], console_[1]);
  }
  void TearDown() override {
    group_.reset();
    ::close(console_[0]);
    ::close(console_[1]);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  WorkerSpec Spec(int rank, int attempt, std::vector<std::string> args,
                  const std::string& imports = "json") {
    WorkerSpec spec;
    spec.rank = rank;
    spec.local_rank = rank;
    spec.attempt = attempt;
    spec.argv = {kPython, "-u", script_};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.argv.push_back(absl::StrCat("--local_rank=", rank));
    spec.env = {"PATH=/usr/bin:/bin",
                absl::StrCat("PYTHONPATH=", DGT_SOURCE_DIR, "/python"),
                absl::StrCat("DGT_FORKSERVER_IMPORTS=", imports),
                absl::StrCat("RANK=", rank),
                absl::StrCat("LOCAL_RANK=", rank),
                absl::StrCat("TORCHELASTIC_RESTART_COUNT=", attempt)};
    return spec;
  }

  // Starts rank 0 (it exits 0 at once), then the fork server, and waits until it is ready.
  void StartServer(const std::string& imports = "json") {
    ASSERT_TRUE(group_->Start({Spec(0, 0, {"exit", "0"}, imports)}).ok());
    ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 1; }));
    ASSERT_TRUE(group_->StartForkServer().ok());
    ASSERT_EQ(spawned_.size(), 2u);
    server_ = spawned_[1];
  }

  std::string Console() {
    char buf[4096];
    for (ssize_t n; (n = ::read(console_[0], buf, sizeof buf)) > 0;) {
      console_text_.append(buf, static_cast<size_t>(n));
    }
    return console_text_;
  }

  boost::asio::io_context io_;
  std::vector<WorkerExit> exits_;
  std::vector<pid_t> spawned_, reaped_;
  std::unique_ptr<WorkerGroup> group_ = std::make_unique<WorkerGroup>(
      io_, [this](const WorkerExit& e) { exits_.push_back(e); },
      [this](pid_t p) { spawned_.push_back(p); }, [this](pid_t p) { reaped_.push_back(p); });
  std::string dir_;
  std::string script_;
  int console_[2] = {-1, -1};
  std::string console_text_;
  pid_t server_ = 0;
};

TEST_F(ForkServerTest, AForkedReplacementRunsAsTheRankAndExitsWithItsCode) {
  LogCapture log;
  StartServer();
  ASSERT_TRUE(RunUntil(io_, [&] { return group_->fork_server_ready(); }));
  EXPECT_NE(log.text().find(absl::StrCat("info dgt-run: fork server pid ", server_, " is ready")),
            std::string::npos);
  WorkerSpec spec = Spec(1, 1, {"exit", "3"});
  spec.stdout_file = dir_ + "/stdout.log";
  spec.stderr_file = dir_ + "/stderr.log";
  absl::StatusOr<pid_t> pid = group_->StartReplacement(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(spawned_.size(), 3u);
  EXPECT_EQ(spawned_.back(), *pid);  // Its process group goes to the watchdog.
  EXPECT_EQ(group_->alive(), 1);
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 2 && group_->drained(); }));
  EXPECT_EQ(exits_[1].pid, *pid);
  EXPECT_EQ(exits_[1].rank, 1);
  EXPECT_EQ(exits_[1].attempt, 1);
  EXPECT_EQ(exits_[1].exit_code, 3);
  EXPECT_EQ(exits_[1].signal, 0);
  EXPECT_EQ(reaped_.back(), *pid);
  EXPECT_NE(log.text().find(absl::StrCat("info dgt-run: restarted rank 1 (attempt 1) as pid ", *pid,
                                         ", forked by the fork server")),
            std::string::npos);
  EXPECT_EQ(ReadFile(spec.stdout_file), "rank 1 ['exit', '3', '--local_rank=1'] forked\n");
  EXPECT_EQ(ReadFile(spec.stderr_file), "stderr of 1 -\n");
  const std::string console = Console();
  EXPECT_NE(console.find("[rank1]: rank 1 ['exit', '3', '--local_rank=1'] forked\n"),
            std::string::npos);
  EXPECT_NE(console.find("[rank1]: stderr of 1 -\n"), std::string::npos);
  EXPECT_NE(console.find("[rank0]: rank 0 ['exit', '0', '--local_rank=0'] fresh\n"),
            std::string::npos);
  // A second one from the same server; an uncaught signal is reported as such.
  absl::StatusOr<pid_t> second = group_->StartReplacement(Spec(1, 2, {"signal"}));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 3; }));
  EXPECT_EQ(exits_[2].pid, *second);
  EXPECT_EQ(exits_[2].signal, SIGTERM);
  EXPECT_EQ(exits_[2].exit_code, 0);
  group_.reset();
  EXPECT_TRUE(WaitGone(server_));
}

TEST_F(ForkServerTest, AServerKilledMidRunTakesItsChildWithItAsSigkill) {
  StartServer();
  ASSERT_TRUE(RunUntil(io_, [&] { return group_->fork_server_ready(); }));
  const std::string marker = dir_ + "/running";
  absl::StatusOr<pid_t> pid = group_->StartReplacement(Spec(1, 1, {"wait", marker}));
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return ::access(marker.c_str(), F_OK) == 0; }));
  ASSERT_EQ(::kill(server_, SIGKILL), 0);
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 2; }));
  EXPECT_EQ(exits_[1].pid, *pid);
  EXPECT_EQ(exits_[1].signal, SIGKILL);
  EXPECT_EQ(exits_[1].exit_code, 0);
  EXPECT_FALSE(group_->fork_server_ready());
  EXPECT_TRUE(Gone(*pid));
  // The next replacement is a fresh process.
  absl::StatusOr<pid_t> fresh = group_->StartReplacement(Spec(1, 2, {"exit", "4"}));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 3 && group_->drained(); }));
  EXPECT_EQ(exits_[2].exit_code, 4);
  EXPECT_NE(Console().find("[rank1]: rank 1 ['exit', '4', '--local_rank=1'] fresh\n"),
            std::string::npos);
}

TEST_F(ForkServerTest, NothingOutlivesTheGroup) {
  StartServer();
  ASSERT_TRUE(RunUntil(io_, [&] { return group_->fork_server_ready(); }));
  const std::string marker = dir_ + "/running";
  absl::StatusOr<pid_t> pid = group_->StartReplacement(Spec(1, 1, {"wait", marker}));
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return ::access(marker.c_str(), F_OK) == 0; }));
  group_.reset();
  EXPECT_TRUE(WaitGone(server_));
  EXPECT_TRUE(WaitGone(*pid));
}

// A group that a new round replaces stops its server (NodeWorkers::StartRound): it is reaped
// and unregistered, and a replacement is a fresh process.
TEST_F(ForkServerTest, StopForkServerEndsItAndReplacementsStartFresh) {
  StartServer();
  ASSERT_TRUE(RunUntil(io_, [&] { return group_->fork_server_ready(); }));
  group_->StopForkServer();
  EXPECT_FALSE(group_->fork_server_ready());
  ASSERT_TRUE(RunUntil(io_, [&] { return !reaped_.empty() && reaped_.back() == server_; }));
  EXPECT_TRUE(Gone(server_));
  absl::StatusOr<pid_t> fresh = group_->StartReplacement(Spec(1, 1, {"exit", "0"}));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 2 && group_->drained(); }));
  EXPECT_NE(Console().find("[rank1]: rank 1 ['exit', '0', '--local_rank=1'] fresh\n"),
            std::string::npos);
}

// A rank whose interpreter options differ from the server's cannot be forked from it.
TEST_F(ForkServerTest, OtherInterpreterOptionsGiveAFreshProcess) {
  LogCapture log;
  StartServer();
  ASSERT_TRUE(RunUntil(io_, [&] { return group_->fork_server_ready(); }));
  WorkerSpec spec = Spec(1, 1, {"exit", "5"});
  spec.argv[1] = "-B";
  absl::StatusOr<pid_t> pid = group_->StartReplacement(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 2 && group_->drained(); }));
  EXPECT_EQ(exits_[1].exit_code, 5);
  EXPECT_NE(log.text().find("warning dgt-run: rank 1: rank 1's interpreter and options differ "
                            "from the fork server's; starting a fresh process\n"),
            std::string::npos);
  EXPECT_NE(Console().find("[rank1]: rank 1 ['exit', '5', '--local_rank=1'] fresh\n"),
            std::string::npos);
  EXPECT_TRUE(group_->fork_server_ready());  // Still serving.
}

TEST_F(ForkServerTest, ANotReadyServerGivesAFreshProcessLoggedOnce) {
  LogCapture log;
  StartServer();
  // The loop has not run since the start: the server cannot have reported ready.
  absl::StatusOr<pid_t> first = group_->StartReplacement(Spec(1, 1, {"exit", "0"}));
  absl::StatusOr<pid_t> second = group_->StartReplacement(Spec(2, 1, {"exit", "0"}));
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 3 && group_->drained(); }));
  const std::string text = log.text();
  const std::string line =
      "info dgt-run: rank 1: the fork server is not ready; starting a fresh "
      "process\n";
  EXPECT_NE(text.find(line), std::string::npos);
  EXPECT_EQ(text.find("the fork server is not ready", text.find(line) + line.size()),
            std::string::npos);
  const std::string console = Console();
  EXPECT_NE(console.find("[rank1]: rank 1 ['exit', '0', '--local_rank=1'] fresh\n"),
            std::string::npos);
  EXPECT_NE(console.find("[rank2]: rank 2 ['exit', '0', '--local_rank=2'] fresh\n"),
            std::string::npos);
}

TEST_F(ForkServerTest, AServerThatFailsItsImportsIsOffWithItsStderrQuoted) {
  LogCapture log;
  StartServer("json,no_such_module_here");
  ASSERT_TRUE(RunUntil(
      io_, [&] { return log.text().find("before it reported ready") != std::string::npos; }));
  const std::string text = log.text();
  EXPECT_NE(text.find(absl::StrCat("warning dgt-run: fork server pid ", server_,
                                   " exited with code 1 before it reported ready")),
            std::string::npos);
  EXPECT_NE(text.find("\n  ModuleNotFoundError: No module named 'no_such_module_here'"),
            std::string::npos);
  EXPECT_NE(Console().find("[forkserver]: ModuleNotFoundError: No module named "
                           "'no_such_module_here'\n"),
            std::string::npos);
  EXPECT_FALSE(group_->fork_server_ready());
  EXPECT_EQ(reaped_.back(), server_);
  absl::StatusOr<pid_t> fresh = group_->StartReplacement(Spec(1, 1, {"exit", "0"}));
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(RunUntil(io_, [&] { return exits_.size() == 2 && group_->drained(); }));
  EXPECT_NE(Console().find("[rank1]: rank 1 ['exit', '0', '--local_rank=1'] fresh\n"),
            std::string::npos);
}

TEST(PythonPrefixLengthTest, CountsTheInterpreterAndItsOptions) {
  EXPECT_EQ(PythonPrefixLength({"python3", "-u", "train.py", "-u"}), 2u);
  EXPECT_EQ(PythonPrefixLength({"/usr/bin/python3.11", "-u", "-m", "pkg.mod"}), 2u);
  EXPECT_EQ(PythonPrefixLength({"python", "-u", "-c", "code", "train.py"}), 2u);
  EXPECT_EQ(PythonPrefixLength({"python", "-u", "--", "-x.py"}), 2u);
  EXPECT_EQ(PythonPrefixLength({"python", "-W", "ignore", "-X", "dev", "-uB", "t.py"}), 6u);
  EXPECT_EQ(PythonPrefixLength({"python", "-Wignore", "t.py"}), 2u);
  EXPECT_EQ(PythonPrefixLength({"python", "-um", "pkg"}), 0u);
  EXPECT_EQ(PythonPrefixLength({"/bin/sh", "-c", "x"}), 0u);
  EXPECT_EQ(PythonPrefixLength({"python3"}), 1u);
}

TEST(EnvWithoutRankTest, DropsTheRanksVariablesAndDgtsChannels) {
  EXPECT_EQ(EnvWithoutRank({"PATH=/bin", "RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=4",
                            "TORCHELASTIC_RESTART_COUNT=2", "DGT_STANDBY=1", "DGT_FORKSERVER_FD=3",
                            "MASTER_PORT=5"}),
            (std::vector<std::string>{"PATH=/bin", "WORLD_SIZE=4", "MASTER_PORT=5"}));
}

}  // namespace
}  // namespace dgt::agent
