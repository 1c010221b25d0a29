// FakeProcessLauncher: a ProcessLauncher for unit tests. "Processes" are records with an eventfd
// as exit event and pipes for their output; tests make them write, exit, or react to signals.
#ifndef DGT_TESTS_AGENT_FAKE_PROCESS_LAUNCHER_H_
#define DGT_TESTS_AGENT_FAKE_PROCESS_LAUNCHER_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/workers/process_launcher.h"

namespace dgt::agent {

class FakeProcessLauncher final : public ProcessLauncher {
 public:
  struct Process {
    LaunchRequest request;
    int exit_event = -1;  // Our copy of the exit eventfd.
    int out = -1;         // Write ends.
    int err = -1;
    int channel = -1;          // The standby's end of its channel (request.standby_channel).
    std::vector<int> signals;  // Every signal its group received, in order.
    int wait_status = -1;      // Set once exited.
  };

  ~FakeProcessLauncher() override {
    for (auto& [pid, p] : processes_) CloseEnds(p);
  }

  absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest& request) override {
    if (request.argv.empty() || request.argv[0] == "missing") {
      return absl::NotFoundError("'missing' was not found in PATH");
    }
    Process p;
    p.request = request;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      return absl::InternalError("pipe2");
    }
    int efd = ::eventfd(0, EFD_CLOEXEC);
    LaunchedProcess launched;
    launched.pid = next_pid_++;
    launched.exit_fd = ::dup(efd);
    launched.stdout_fd = out[0];
    launched.stderr_fd = err[0];
    if (request.standby_channel) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        return absl::InternalError("socketpair");
      }
      launched.channel_fd = pair[0];
      p.channel = pair[1];
    }
    p.exit_event = efd;
    p.out = out[1];
    p.err = err[1];
    launch_order_.push_back(launched.pid);
    processes_[launched.pid] = std::move(p);
    return launched;
  }

  // Signals make a process exit by that signal, unless it ignores it (IgnoreSignal).
  void SignalGroup(pid_t pgid, int sig) override {
    auto it = processes_.find(pgid);
    if (it == processes_.end()) return;
    it->second.signals.push_back(sig);
    if (it->second.wait_status >= 0) return;
    if (ignored_[pgid].count(sig) > 0 && sig != SIGKILL) return;
    Exit(pgid, sig);  // Terminated by the signal: status is the signal number.
  }

  int Reap(pid_t pid) override { return processes_.at(pid).wait_status; }

  // The process writes `text` to stdout (1) or stderr (2).
  void Write(pid_t pid, int stream, const std::string& text) {
    Process& p = processes_.at(pid);
    ssize_t n = ::write(stream == 1 ? p.out : p.err, text.data(), text.size());
    (void)n;
  }
  // The process exits with `code`.
  void ExitWithCode(pid_t pid, int code) { Exit(pid, (code & 0xff) << 8); }
  void IgnoreSignal(pid_t pid, int sig) { ignored_[pid].insert(sig); }
  // A standby writes `text` on its channel.
  void WriteChannel(pid_t pid, const std::string& text) {
    ssize_t n = ::write(processes_.at(pid).channel, text.data(), text.size());
    (void)n;
  }
  // What the agent wrote on the standby's channel so far (non-blocking); "" when nothing.
  std::string ReadChannel(pid_t pid) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(processes_.at(pid).channel, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // The standby closes its end of the channel (as a process that died does).
  void CloseChannel(pid_t pid) {
    Process& p = processes_.at(pid);
    if (p.channel >= 0) ::close(p.channel);
    p.channel = -1;
  }

  const Process& process(pid_t pid) const { return processes_.at(pid); }
  const std::vector<pid_t>& launch_order() const { return launch_order_; }

 private:
  void Exit(pid_t pid, int wait_status) {
    Process& p = processes_.at(pid);
    if (p.wait_status >= 0) return;
    p.wait_status = wait_status;
    uint64_t one = 1;
    ssize_t n = ::write(p.exit_event, &one, sizeof one);
    (void)n;
    CloseEnds(p);
  }
  static void CloseEnds(Process& p) {
    for (int* fd : {&p.exit_event, &p.out, &p.err, &p.channel}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  pid_t next_pid_ = 1000;
  std::map<pid_t, Process> processes_;
  std::map<pid_t, std::set<int>> ignored_;
  std::vector<pid_t> launch_order_;
};

}  // namespace dgt::agent

#endif  // DGT_TESTS_AGENT_FAKE_PROCESS_LAUNCHER_H_
