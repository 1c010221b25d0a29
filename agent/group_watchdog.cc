#include "agent/group_watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/errno_status.h"

namespace dgt::agent {
namespace {

// The watchdog's loop. Only async-signal-safe calls: it runs in a child of a process that may
// have threads.
[[noreturn]] void WatchdogMain(int read_fd) {
  ::setpgid(0, 0);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    struct sigaction sa = {};
    sa.sa_handler = SIG_IGN;
    ::sigaction(sig, &sa, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Keep no other descriptor of the agent (sockets, the console) open.
  int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd != read_fd) ::close(fd);
  }
  constexpr int kMax = 8192;
  static pid_t groups[kMax];
  int count = 0;
  int32_t record = 0;
  for (;;) {
    ssize_t n = ::read(read_fd, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof record)) break;  // EOF: the agent is gone.
    if (record > 0) {
      if (count < kMax) groups[count++] = record;
    } else {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -record) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

void WriteRecord(int fd, int32_t record) {
  if (fd < 0) return;
  ssize_t n;
  do {
    n = ::write(fd, &record, sizeof record);  // Below PIPE_BUF: atomic.
  } while (n < 0 && errno == EINTR);
}

}  // namespace

absl::Status GroupWatchdog::Start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return ErrnoToStatus(e, "fork");
  }
  if (pid == 0) {
    ::close(fds[1]);
    WatchdogMain(fds[0]);
  }
  ::close(fds[0]);
  fd_ = fds[1];
  pid_ = pid;
  return absl::OkStatus();
}

void GroupWatchdog::Register(pid_t pgid) { WriteRecord(fd_, static_cast<int32_t>(pgid)); }

void GroupWatchdog::Unregister(pid_t pgid) { WriteRecord(fd_, -static_cast<int32_t>(pgid)); }

GroupWatchdog::~GroupWatchdog() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0) {
    // The watchdog only sends kills after EOF, so it exits promptly.
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace dgt::agent
