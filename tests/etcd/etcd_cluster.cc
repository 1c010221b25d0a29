#include "tests/etcd/etcd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "etcd/client.h"

namespace dgt::etcd::testing {
namespace {

// Ports the kernel hands out for port 0, held open together so the picks are distinct.
std::vector<int> FreePorts(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd >= 0) close(fd);
      break;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

std::string PeerUrl(int port) { return absl::StrCat("http://127.0.0.1:", port); }

}  // namespace

std::string EtcdCluster::FindEtcd() {
  if (const char* env = std::getenv("DGT_ETCD_BIN"); env != nullptr && *env != '\0') {
    return access(env, X_OK) == 0 ? env : "";
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (dir.empty()) continue;
      std::string candidate = absl::StrCat(dir, "/etcd");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  if (access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
  return "";
}

EtcdCluster::~EtcdCluster() {
  for (size_t i = 0; i < pids_.size(); ++i) Kill(static_cast<int>(i));
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  if (sweeper_fd_ >= 0) ::close(sweeper_fd_);  // The sweeper finds nothing left and exits.
}

namespace {

// Starts `/bin/sh -c 'cat >/dev/null; rm -rf "$0"' DIR` in its own session (a Ctrl-C to the
// test's process group does not reach it) with its stdin on a pipe whose write end only this
// process holds (O_CLOEXEC). When this process ends, however it ends, the pipe reaches EOF and
// the directory is removed. Returns the write end, or -1 (no sweeper; the destructor still
// cleans up on a normal exit).
int StartSweeper(const std::string& dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return -1;
  }
  if (pid == 0) {  // Only async-signal-safe calls until exec.
    ::setsid();
    ::dup2(fds[0], STDIN_FILENO);  // dup2 clears O_CLOEXEC on the copy.
    ::execl("/bin/sh", "sh", "-c", "exec >/dev/null 2>&1; cat; rm -rf \"$0\"", dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);
  return fds[1];  // The sweeper is reparented when this process exits; init reaps it.
}

}  // namespace

absl::Status EtcdCluster::Start(int members, absl::Duration timeout) {
  etcd_ = FindEtcd();
  if (etcd_.empty()) {
    return absl::FailedPreconditionError(
        "no etcd binary ($DGT_ETCD_BIN, PATH, /usr/bin/etcd); install etcd-server "
        "(scripts/install-deps.sh)");
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/dgt-etcd-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, " failed"));
  }
  dir_ = pattern;
  sweeper_fd_ = StartSweeper(dir_);
  std::vector<int> ports = FreePorts(2 * members);
  if (static_cast<int>(ports.size()) != 2 * members) {
    return absl::UnavailableError("could not pick free loopback ports");
  }
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(ports[2 * i]);
    peer_ports_.push_back(ports[2 * i + 1]);
    client_endpoints_.push_back(absl::StrCat("127.0.0.1:", ports[2 * i]));
  }
  pids_.assign(members, -1);
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = Spawn(i); !s.ok()) return s;
  }
  return WaitHealthy(timeout);
}

absl::Status EtcdCluster::Spawn(int i) {
  std::vector<std::string> cluster;
  for (size_t j = 0; j < peer_ports_.size(); ++j) {
    cluster.push_back(absl::StrCat("m", j, "=", PeerUrl(peer_ports_[j])));
  }
  const std::string client_url = PeerUrl(client_ports_[i]);
  const std::string peer_url = PeerUrl(peer_ports_[i]);
  std::vector<std::string> args = {
      etcd_,
      absl::StrCat("--name=m", i),
      absl::StrCat("--data-dir=", dir_, "/m", i),
      absl::StrCat("--listen-client-urls=", client_url),
      absl::StrCat("--advertise-client-urls=", client_url),
      absl::StrCat("--listen-peer-urls=", peer_url),
      absl::StrCat("--initial-advertise-peer-urls=", peer_url),
      absl::StrCat("--initial-cluster=", absl::StrJoin(cluster, ",")),
      "--initial-cluster-token=dgt-etcd-test",
      "--initial-cluster-state=new",
      "--heartbeat-interval=50",
      "--election-timeout=500",
      "--logger=zap",
      "--log-level=warn",
  };
  const std::string log = absl::StrCat(dir_, "/m", i, ".log");
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  pids_[i] = pid;
  return absl::OkStatus();
}

void EtcdCluster::Kill(int i) {
  if (pids_[i] <= 0) return;
  kill(pids_[i], SIGKILL);
  // SIGKILL cannot be caught; the reap is bounded anyway (5 s) so a test never hangs here.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (waitpid(pids_[i], nullptr, WNOHANG) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  pids_[i] = -1;
}

void EtcdCluster::Pause(int i) {
  if (pids_[i] > 0) kill(pids_[i], SIGSTOP);
}

void EtcdCluster::Resume(int i) {
  if (pids_[i] > 0) kill(pids_[i], SIGCONT);
}

absl::Status EtcdCluster::Restart(int i) {
  if (pids_[i] > 0) return absl::FailedPreconditionError(absl::StrCat("member ", i, " runs"));
  return Spawn(i);
}

std::string EtcdCluster::LogTail(int i) const {
  std::ifstream in(absl::StrCat(dir_, "/m", i, ".log"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const size_t from = lines.size() > 3 ? lines.size() - 3 : 0;
  return absl::StrJoin(lines.begin() + static_cast<std::ptrdiff_t>(from), lines.end(), "\n");
}

absl::StatusOr<int> EtcdCluster::Leader(absl::Duration timeout) {
  ClientOptions options;
  options.endpoints = client_endpoints_;
  options.attempt_timeout = absl::Milliseconds(500);
  auto client = Client::Create(options);
  if (!client.ok()) return client.status();
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "none";
  std::string named = "no member asked";
  while (absl::Now() < deadline) {
    std::map<uint64_t, int> member_index;
    std::vector<uint64_t> leaders;
    for (size_t i = 0; i < client_endpoints_.size(); ++i) {
      if (pids_[i] <= 0) continue;
      auto status = (*client)->GetMemberStatus(client_endpoints_[i]);
      if (!status.ok()) {
        last = status.status().ToString();
        leaders.push_back(0);
        continue;
      }
      member_index[status->member_id] = static_cast<int>(i);
      leaders.push_back(status->leader_id);
    }
    const bool agree =
        !leaders.empty() && leaders[0] != 0 &&
        std::all_of(leaders.begin(), leaders.end(), [&](uint64_t l) { return l == leaders[0]; });
    if (agree && member_index.count(leaders[0]) > 0) return member_index[leaders[0]];
    if (!leaders.empty()) named = absl::StrCat("leaders named: ", absl::StrJoin(leaders, ","));
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::vector<std::string> logs;
  for (size_t i = 0; i < client_endpoints_.size(); ++i) {
    logs.push_back(absl::StrCat("m", i, ": ", LogTail(static_cast<int>(i))));
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd members agree on no leader within ",
                                                  absl::FormatDuration(timeout), " (", last, ")\n",
                                                  absl::StrJoin(logs, "\n")));
}

absl::Status EtcdCluster::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto leader = Leader(timeout);
  if (!leader.ok()) return leader.status();
  for (size_t i = 0; i < client_endpoints_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    ClientOptions options;
    options.endpoints = {client_endpoints_[i]};
    options.call_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(100));
    auto client = Client::Create(options);
    if (!client.ok()) return client.status();
    auto put = (*client)->Put("dgt-test-health", client_endpoints_[i]);
    if (!put.ok()) return put.status();
  }
  return absl::OkStatus();
}

}  // namespace dgt::etcd::testing
