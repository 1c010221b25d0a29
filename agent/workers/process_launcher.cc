#include "agent/workers/process_launcher.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/errno_status.h"

namespace dgt::agent {

absl::StatusOr<std::string> ResolveExecutable(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    return absl::NotFoundError(absl::StrCat("'", program, "' is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("'", program, "' was not found in PATH"));
}

pid_t ForkWithSignalsBlocked() {
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return pid;
}

void ResetSignalHandlersInChild() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction old = {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;  // Signals libc reserves.
    if (old.sa_handler == SIG_DFL || (old.sa_handler == SIG_IGN && sig != SIGPIPE)) continue;
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
}

absl::StatusOr<LaunchedProcess> ForkExecLauncher::Launch(const LaunchRequest& request) {
  const pid_t agent_pid = ::getpid();
  auto exe = ResolveExecutable(request.argv.at(0));
  if (!exe.ok()) return exe.status();
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<char*> argv, envp;
  for (const std::string& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return ErrnoToStatus(e, "pipe2");
  }
  int channel[2] = {-1, -1};  // [0] the agent's end, [1] the child's.
  if (request.standby_channel &&
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0) {
    int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return ErrnoToStatus(e, "socketpair");
  }
  const std::string exec_error = absl::StrCat("dgt-run: cannot execute '", *exe,
                                              "' for local rank ", request.local_rank, ": ");
  // Every signal stays blocked from fork until the child has put back the default handlers:
  // the agent's stop signal for the group may reach the child before exec, and the inherited
  // Asio handler would then write it into the agent's own signal pipe (the agent took its own
  // SIGTERM for an outside one and exited 143 instead of with the worker's code).
  pid_t pid = ForkWithSignalsBlocked();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], channel[0], channel[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return ErrnoToStatus(e, "fork");
  }
  if (pid == 0) {
    // Each worker leads a new session (and so a new process group), as torchrun 2.x starts its
    // workers (subprocess start_new_session=True). With the kernel's autogroup scheduling, one
    // session shares one CPU share: workers left in dgt-run's session split a single share among
    // them (two torch imports took 2x as long as under torchrun on a busy machine).
    ::setsid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent_pid) ::_exit(126);  // The agent died before prctl took effect.
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    // Nothing else of the agent reaches the worker (its store's listening socket, the
    // rendezvous connection, the watchdog pipe, descriptors dgt-run itself inherited): a
    // worker's child outliving the agent must not keep the store port open. As Python's
    // subprocess close_fds=True, which torchrun relies on.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 65536; ++fd) {  // Kernels before 5.11.
        if (fd != channel[1]) ::close(fd);
      }
    }
    if (channel[1] >= 0) {
      // The standby's channel, at its fixed number and inherited across exec.
      if (channel[1] != kStandbyChannelFd) ::dup2(channel[1], kStandbyChannelFd);
      ::fcntl(kStandbyChannelFd, F_SETFD, 0);
    }
    ResetSignalHandlersInChild();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(exe->c_str(), argv.data(), envp.data());
    // errno's reason (ENOEXEC, EACCES, ...): strerrordesc_np is a table lookup, without the
    // locale and allocation that make strerror unsafe after fork.
    const char* reason = ::strerrordesc_np(errno);
    for (const char* part :
         {exec_error.c_str(), reason != nullptr ? reason : "exec failed", "\n"}) {
      ssize_t ignored = ::write(STDERR_FILENO, part, std::strlen(part));
      (void)ignored;
    }
    ::_exit(127);
  }
  // No setpgid() here: it would make the child a group leader before its setsid(), which then
  // fails. A signal sent before the child's setsid() reaches it through SignalGroup's fallback.
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (channel[1] >= 0) ::close(channel[1]);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int e = errno;
    SignalGroup(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    if (channel[0] >= 0) ::close(channel[0]);
    return ErrnoToStatus(e, "pidfd_open");
  }
  LaunchedProcess p;
  p.pid = pid;
  p.exit_fd = pidfd;
  p.stdout_fd = out_pipe[0];
  p.stderr_fd = err_pipe[0];
  p.channel_fd = channel[0];
  return p;
}

void ForkExecLauncher::SignalGroup(pid_t pgid, int sig) {
  // ESRCH: the worker has not run its setsid() yet, so its group does not exist; the worker
  // itself gets the signal (blocked until it reset its handlers, then acted on), and it has
  // no children yet.
  if (::kill(-pgid, sig) != 0 && errno == ESRCH) ::kill(pgid, sig);
}

int ForkExecLauncher::Reap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  return status;
}

bool ExitFdReady(int exit_fd) {
  pollfd p{exit_fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

ProcessLauncher* DefaultProcessLauncher() {
  static ForkExecLauncher* launcher = new ForkExecLauncher();
  return launcher;
}

}  // namespace dgt::agent
