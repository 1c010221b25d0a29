// dgt-agent end to end: the real dgt-agent, dgt-run and dgt-rendezvous binaries, with the in-test
// jobs service (tests/daemon/fake_jobs_service.h) doing what the scheduler in dgt-rendezvous
// does. Checks:
// - a 1-node x 2-process job runs to completion and each rank's stdout/stderr comes back
//   through ReadLog.
// - a job whose processes ignore SIGTERM is cancelled and every one of them is gone within the
//   grace period.
// - SIGTERM drains the daemon and it exits 0.
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "daemon/node_facts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/fake_jobs_service.h"

extern char** environ;

namespace dgt::daemon {
namespace {

namespace fs = std::filesystem;
using testing::DescribeAll;
using testing::FakeJobsService;

// dgt-run's exit code when SIGTERM stopped its run (what a drain reports).
constexpr int kDrainedExit = 143;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool Listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log,
            const std::vector<std::string>& extra_env = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0) << args[0];
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits for `pid` up to `timeout`; its exit status, or -1 (then it is killed).
int WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// PIDs whose command line (arguments joined by spaces) contains `needle`, or with `exact`, is
// `needle`.
std::vector<pid_t> Pids(const std::string& needle, bool exact = false) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (!cmd.empty()) cmd.pop_back();  // The last argument's NUL.
    if (exact ? cmd == needle : cmd.find(needle) != std::string::npos) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// dgt-agent's command line and --check: usage errors and bad config values exit 2 with
// "dgt-agent: error: " and a message naming the file, key and value.
TEST(DgtAgentCliTest, UsageAndCheckErrors) {
  char tmpl[] = "/tmp/dgt-agent-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string agent = std::string(DGT_BIN_DIR) + "/dgt-agent";
  const struct passwd* pw = ::getpwuid(::geteuid());
  const std::string good =
      "rendezvous_endpoints: [\"127.0.0.1:29400\"]\nrun_as_user: " + std::string(pw->pw_name) +
      "\nallow_root: true\n";
  // Runs dgt-agent with `args`; its exit code and output (stdout and stderr).
  auto run = [&](const std::vector<std::string>& args) {
    const std::string log = dir + "/out.log";
    fs::remove(log);
    std::vector<std::string> argv = {agent};
    argv.insert(argv.end(), args.begin(), args.end());
    const int rc = WaitExit(Spawn(argv, log), absl::Seconds(30));
    return std::make_pair(rc, Slurp(log));
  };
  auto check = [&](const std::string& name, const std::string& yaml) {
    std::ofstream(dir + "/" + name) << yaml;
    return run({"--config", dir + "/" + name, "--check"});
  };
  using Result = std::pair<int, std::string>;
  EXPECT_EQ(run({"--bogus"}),
            Result(2,
                   "dgt-agent: error: The following argument was not expected: --bogus (see "
                   "dgt-agent --help)\n"));
  EXPECT_EQ(check("keylist.yaml", good + "[a]: 2\n"),
            Result(2, "dgt-agent: error: " + dir +
                          "/keylist.yaml:4:1: a key must be a string, got '[a]'\n"));
  std::ofstream(dir + "/alias.yaml")
      << "rendezvous_endpoints: [\"127.0.0.1:1\", \"localhost:1\"]\nrun_as_user: " << pw->pw_name
      << "\nallow_root: true\n";
  EXPECT_EQ(run({"--config", dir + "/alias.yaml", "--check"}),
            Result(2, "dgt-agent: error: " + dir +
                          "/alias.yaml: rendezvous_endpoints: '127.0.0.1:1' and 'localhost:1' "
                          "are the same replica (both 127.0.0.1:1); list each replica once\n"));
  EXPECT_EQ(check("dir.yaml", good + "dgt_run: /tmp\n"),
            Result(2, "dgt-agent: error: " + dir +
                          "/dir.yaml: dgt_run: is a directory; must be an executable file "
                          "(dgt-run), got '/tmp'\n"));
  EXPECT_EQ(check("ok.yaml", good + "dgt_run: /bin/true\n"),
            Result(0, dir + "/ok.yaml: OK (node " + Hostname() + ", 1 endpoint(s), jobs as " +
                          pw->pw_name + " in /var/lib/dgt/jobs)\n"));
  fs::remove_all(dir);
}

class DaemonE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt-agent-e2e-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const int port = FreePort();
    rdzv_endpoint_ = "127.0.0.1:" + std::to_string(port);
    rdzv_ = Spawn({std::string(DGT_BIN_DIR) + "/dgt-rendezvous", "--listen", rdzv_endpoint_},
                  dir_ + "/rendezvous.log");
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!Listening(port) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(Listening(port)) << Slurp(dir_ + "/rendezvous.log");
    const struct passwd* pw = ::getpwuid(::geteuid());
    std::ofstream(dir_ + "/agent.yaml")
        << "rendezvous_endpoints: [\"" << service_.endpoint() << "\"]\n"
        << "node_name: e2e-node\nrun_as_user: " << pw->pw_name << "\nallow_root: true\n"
        << "work_dir: " << dir_ << "/jobs\ndgt_run: " << DGT_BIN_DIR << "/dgt-run\n"
        << "stop_grace_s: 5\n";
    StartAgent();
  }
  void TearDown() override {
    if (agent_ > 0) {
      ::kill(agent_, SIGKILL);
      ::waitpid(agent_, nullptr, 0);
    }
    if (rdzv_ > 0) {
      ::kill(rdzv_, SIGKILL);
      ::waitpid(rdzv_, nullptr, 0);
    }
    if (HasFailure()) {
      std::cerr << "--- agent.log\n" << Slurp(dir_ + "/agent.log");
      for (const char* j : {"job-1", "job-2", "job-3", "job-4"}) {
        std::cerr << "--- " << j << "/dgt-run.log\n" << Slurp(dir_ + "/jobs/" + j + "/dgt-run.log");
      }
    }
    stop_notes_ = true;
    if (notes_reader_.joinable()) notes_reader_.join();
    if (notify_fd_ >= 0) ::close(notify_fd_);
    fs::remove_all(dir_);
  }

  // The first start runs as under systemd: NOTIFY_SOCKET (a datagram socket the test reads)
  // and WATCHDOG_USEC=400000 (WATCHDOG=1 every 200 ms).
  void StartAgent() {
    std::vector<std::string> env;
    if (notify_fd_ < 0) {
      const std::string path = dir_ + "/notify.sock";
      notify_fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
      ASSERT_EQ(::bind(notify_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
      env = {"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=400000"};
      notes_reader_ = std::thread([this] { ReadNotifications(); });
    }
    agent_ = Spawn({std::string(DGT_BIN_DIR) + "/dgt-agent", "--config", dir_ + "/agent.yaml"},
                   dir_ + "/agent.log", env);
  }

  // The sd_notify datagrams received so far. A thread drains the socket as systemd does: a
  // full datagram queue (net.unix.max_dgram_qlen) would block the daemon's sd_notify.
  std::vector<std::string> Notifications() {
    dgt::MutexLock lock(&notes_mu_);
    return notes_;
  }
  void ReadNotifications() {
    char buf[4096];
    while (!stop_notes_.load()) {
      const ssize_t n = ::recv(notify_fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        dgt::MutexLock lock(&notes_mu_);
        notes_.emplace_back(buf, n);
      } else {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
  }

  // Waits until each command line in `commands` runs twice (once per local rank).
  static bool WaitForProcesses(const std::vector<std::string>& commands) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (;;) {
      bool all = true;
      for (const auto& c : commands) all = all && Pids(c, true).size() == 2;
      if (all) return true;
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  bool WaitFor(const std::string& line, absl::Duration timeout) {
    return service_.WaitFor(
        [&](const auto& ms) {
          auto d = DescribeAll(ms);
          return std::find(d.begin(), d.end(), line) != d.end();
        },
        timeout);
  }

  dgt::jobs::v1::ControlMessage Start(const std::string& id, const std::string& command) {
    dgt::jobs::v1::ControlMessage m;
    auto* s = m.mutable_start();
    s->set_job_id(id);
    s->set_rdzv_endpoint(rdzv_endpoint_);
    s->mutable_spec()->set_command(command);
    s->mutable_spec()->set_instance_count(1);
    s->mutable_spec()->mutable_distribution()->set_process_count_per_instance(2);
    (*s->mutable_spec()->mutable_environment_variables())["GREETING"] = "hi";
    return m;
  }

  // ReadLog through the daemon; the LogChunk it answers.
  dgt::jobs::v1::LogChunk ReadLog(uint64_t request_id, const std::string& job, int rank,
                                  const std::string& stream) {
    dgt::jobs::v1::ControlMessage m;
    auto* r = m.mutable_read_log();
    r->set_request_id(request_id);
    r->set_job_id(job);
    r->set_local_rank(rank);
    r->set_stream(stream);
    service_.Send(m);
    const std::string want = "log " + std::to_string(request_id) + " ";
    dgt::jobs::v1::LogChunk chunk;
    service_.WaitFor(
        [&](const auto& ms) {
          for (const auto& msg : ms) {
            if (msg.has_log() && msg.log().request_id() == request_id) {
              chunk = msg.log();
              return true;
            }
          }
          return false;
        },
        absl::Seconds(10));
    return chunk;
  }

  FakeJobsService service_;
  std::string dir_;
  std::string rdzv_endpoint_;
  pid_t rdzv_ = -1;
  pid_t agent_ = -1;
  int notify_fd_ = -1;
  std::thread notes_reader_;
  std::atomic<bool> stop_notes_{false};
  dgt::Mutex notes_mu_;
  std::vector<std::string> notes_ ABSL_GUARDED_BY(notes_mu_);
};

TEST_F(DaemonE2eTest, RunsAJobServesItsLogsCancelsAndDrains) {
  ASSERT_TRUE(WaitFor("hello e2e-node", absl::Seconds(20)));
  const auto hello = service_.received()[0].hello();
  EXPECT_EQ(hello.labels_size(), 0);
  EXPECT_EQ(hello.version(), "0.1.0");

  service_.Send(Start("job-1",
                      "echo \"out rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE $GREETING\"; "
                      "echo \"err rank=$RANK\" >&2"));
  ASSERT_TRUE(WaitFor("update job-1 exited 0", absl::Seconds(45)));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    auto out = ReadLog(10 + rank, "job-1", rank, "stdout");
    EXPECT_EQ(out.code(), 0) << out.error();
    EXPECT_EQ(out.data(), absl::StrCat("out rank=", r, " local=", r, " world=2 hi\n"));
    EXPECT_TRUE(out.eof());
    EXPECT_EQ(out.next_offset(), static_cast<int64_t>(out.data().size()));
    auto err = ReadLog(20 + rank, "job-1", rank, "stderr");
    EXPECT_EQ(err.data(), "err rank=" + r + "\n");
    EXPECT_TRUE(err.eof());
  }
  EXPECT_EQ(ReadLog(30, "job-1", 2, "stdout").code(), 5);  // NOT_FOUND: no rank 2 here.

  // Processes that ignore SIGTERM: only the SIGKILL at the end of the grace period stops them.
  service_.Send(Start("job-2", "trap '' TERM; sleep 613 & sleep 614; wait"));
  ASSERT_TRUE(WaitFor("update job-2 started 0", absl::Seconds(10)));
  ASSERT_TRUE(WaitForProcesses({"sleep 613", "sleep 614"}));
  dgt::jobs::v1::ControlMessage cancel;
  cancel.mutable_cancel()->set_job_id("job-2");
  cancel.mutable_cancel()->set_grace_s(2);
  const absl::Time cancelled = absl::Now();
  service_.Send(cancel);
  ASSERT_TRUE(WaitFor("update job-2 exited 137", absl::Seconds(10)));
  const absl::Duration took = absl::Now() - cancelled;
  EXPECT_GE(took, absl::Seconds(1.5));
  EXPECT_LT(took, absl::Seconds(4));
  // No sleep, no worker shell (its command line names them), no dgt-run (nor its argv) soon
  // after the SIGKILL (a killed process takes a moment to go).
  const absl::Time gone_2 = cancelled + absl::Seconds(3.5);
  while ((!Pids("sleep 61").empty() || !Pids("--rdzv-id=job-2").empty()) && absl::Now() < gone_2) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Pids("sleep 61"), std::vector<pid_t>{});
  EXPECT_EQ(Pids("--rdzv-id=job-2"), std::vector<pid_t>{});

  // SIGTERM drains: the running job is stopped, its exit reported, then the stream closed.
  service_.Send(Start("job-3", "sleep 615"));
  ASSERT_TRUE(WaitForProcesses({"sleep 615"}));
  ::kill(agent_, SIGTERM);
  EXPECT_EQ(WaitExit(agent_, absl::Seconds(10)), 0);
  agent_ = -1;
  auto all = DescribeAll(service_.received());
  ASSERT_GE(all.size(), 4u);
  EXPECT_EQ(
      std::vector<std::string>(all.end() - 4, all.end()),
      (std::vector<std::string>{"update job-3 started 0", "draining",
                                "update job-3 exited " + std::to_string(kDrainedExit), "<end>"}));
  EXPECT_EQ(Pids("sleep 615"), std::vector<pid_t>{});

  // What systemd was told, in order (WATCHDOG=1 left out; counted).
  const absl::Time stopping_by = absl::Now() + absl::Seconds(5);
  while (Notifications().empty() || Notifications().back() != "STOPPING=1") {
    if (absl::Now() > stopping_by) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string ep = service_.endpoint();
  std::vector<std::string> states;
  int watchdogs = 0;
  for (const auto& n : Notifications()) {
    if (n == "WATCHDOG=1") {
      ++watchdogs;
    } else if (n.rfind("STATUS=connecting", 0) != 0) {
      states.push_back(n);
    }
  }
  EXPECT_EQ(states, (std::vector<std::string>{"STATUS=running the health checks", "READY=1",
                                              "STATUS=registered with " + ep + "; idle",
                                              "STATUS=registered with " + ep + "; running job-1",
                                              "STATUS=registered with " + ep + "; idle",
                                              "STATUS=registered with " + ep + "; running job-2",
                                              "STATUS=registered with " + ep + "; idle",
                                              "STATUS=registered with " + ep + "; running job-3",
                                              "STATUS=draining; stopping 1 job(s)", "STOPPING=1"}));
  EXPECT_GE(watchdogs, 5);  // About 3 s at one per 200 ms.

  // A restarted daemon registers again and takes the next job; kill -9 of it (a crash) leaves
  // none of the job's processes behind.
  StartAgent();
  ASSERT_TRUE(service_.WaitFor(
      [](const auto& ms) {
        return std::count_if(ms.begin(), ms.end(), [](const auto& m) { return m.has_hello(); }) ==
               2;
      },
      absl::Seconds(20)));
  // SIGHUP: a bad file is refused and the old config kept (no new registration); a good one
  // registers again with the new labels.
  const std::string config = Slurp(dir_ + "/agent.yaml");
  std::ofstream(dir_ + "/agent.yaml") << config << "colour: blue\n";
  ::kill(agent_, SIGHUP);
  const std::string refused =
      "config reload failed, keeping the old config: " + dir_ + "/agent.yaml: colour: unknown key";
  const absl::Time logged_by = absl::Now() + absl::Seconds(10);
  while (Slurp(dir_ + "/agent.log").find(refused) == std::string::npos && absl::Now() < logged_by) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_NE(Slurp(dir_ + "/agent.log").find(refused), std::string::npos);
  const auto hellos = [](const std::vector<dgt::jobs::v1::NodeMessage>& ms) {
    return std::count_if(ms.begin(), ms.end(), [](const auto& m) { return m.has_hello(); });
  };
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(hellos(service_.received()), 2);
  std::ofstream(dir_ + "/agent.yaml") << config << "labels: {pool: e2e2}\n";
  ::kill(agent_, SIGHUP);
  ASSERT_TRUE(service_.WaitFor([&](const auto& ms) { return hellos(ms) == 3; }, absl::Seconds(10)));
  auto ms = service_.received();
  const auto last_hello =
      std::find_if(ms.rbegin(), ms.rend(), [](const auto& m) { return m.has_hello(); })->hello();
  EXPECT_EQ(last_hello.labels().at("pool"), "e2e2");

  service_.Send(Start("job-4", "sleep 616"));
  ASSERT_TRUE(WaitForProcesses({"sleep 616"}));
  ::kill(agent_, SIGKILL);
  EXPECT_EQ(WaitExit(agent_, absl::Seconds(10)), 128 + SIGKILL);
  agent_ = -1;
  const absl::Time gone_by = absl::Now() + absl::Seconds(5);
  while (!Pids("sleep 616").empty() && absl::Now() < gone_by) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(Pids("sleep 616"), std::vector<pid_t>{});
  EXPECT_EQ(Pids("--rdzv-id=job-4"), std::vector<pid_t>{});
}

}  // namespace
}  // namespace dgt::daemon
