#include "agent/workers/group_watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/workers/process_launcher.h"
#include "common/errno_status.h"

namespace dgt::agent {
namespace {

constexpr int kMaxCleanupPath = 4000;  // With its 8-byte header, below PIPE_BUF (4096).

bool ReadFull(int fd, void* buffer, size_t size) {
  auto* p = static_cast<char*>(buffer);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The watchdog's loop. Only async-signal-safe calls: it runs in a child of a process that may
// have threads.
[[noreturn]] void WatchdogMain(int read_fd) {
  ::setpgid(0, 0);
  ResetSignalHandlersInChild();  // Signals are blocked (Start): none reaches a parent's handler.
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
  static char cleanup_dir[kMaxCleanupPath + 1];
  int count = 0;
  int32_t record = 0;
  for (;;) {
    ssize_t n = ::read(read_fd, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof record)) break;  // EOF: the agent is gone.
    if (record == 0) {
      // A directory to remove: a length, then the path (one write, below PIPE_BUF: atomic).
      int32_t length = 0;
      if (!ReadFull(read_fd, &length, sizeof length) || length < 0 || length > kMaxCleanupPath ||
          !ReadFull(read_fd, cleanup_dir, static_cast<size_t>(length))) {
        break;
      }
      cleanup_dir[length] = '\0';
    } else if (record > 0) {
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
  for (int i = 0; i < count; ++i) {
    // As ForkExecLauncher::SignalGroup: a worker not yet in its own session is killed itself.
    if (::kill(-groups[i], SIGKILL) != 0 && errno == ESRCH) ::kill(groups[i], SIGKILL);
  }
  if (cleanup_dir[0] == '/') {
    // execv is async-signal-safe; a recursive removal by hand would need opendir (malloc).
    char rm[] = "/bin/rm";
    char rf[] = "-rf";
    char dashes[] = "--";
    char* argv[] = {rm, rf, dashes, cleanup_dir, nullptr};
    char* envp[] = {nullptr};
    ::execve(rm, argv, envp);
  }
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
  // As ForkExecLauncher: blocked until the child replaced the handlers it inherited, so a
  // signal in between neither runs the agent's handler nor kills the watchdog.
  pid_t pid = ForkWithSignalsBlocked();
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

absl::Status GroupWatchdog::RemoveOnExit(absl::string_view dir) {
  if (dir.empty() || dir[0] != '/' || dir.size() > static_cast<size_t>(kMaxCleanupPath)) {
    return absl::InvalidArgumentError(
        absl::StrCat("watchdog cleanup directory must be an absolute path of at most ",
                     kMaxCleanupPath, " bytes, got '", dir, "'"));
  }
  return SendCleanupDir(dir);
}

// An empty path: the watchdog's cleanup_dir becomes "", which it does not remove.
absl::Status GroupWatchdog::KeepOnExit() { return SendCleanupDir(""); }

absl::Status GroupWatchdog::SendCleanupDir(absl::string_view dir) {
  if (fd_ < 0) return absl::OkStatus();
  std::string message(8, '\0');
  int32_t header[2] = {0, static_cast<int32_t>(dir.size())};
  std::memcpy(message.data(), header, sizeof header);
  message.append(dir.data(), dir.size());
  ssize_t n;
  do {
    n = ::write(fd_, message.data(), message.size());  // Below PIPE_BUF: atomic.
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(message.size())) return ErrnoToStatus(errno, "watchdog pipe");
  return absl::OkStatus();
}

GroupWatchdog::~GroupWatchdog() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0) {
    // The watchdog only sends kills after EOF, so it exits promptly.
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace dgt::agent
