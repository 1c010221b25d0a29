#include "agent/health/command_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace dgt::agent {
namespace {

// After the shell exits, how long output still in the pipe (or written by a leftover child of
// it) is read before its group is killed.
constexpr absl::Duration kDrainAfterExit = absl::Milliseconds(100);

CommandEnd SpawnFailed(const char* what, int err) {
  CommandEnd end;
  end.exit_code = 127;
  end.output = absl::StrCat("cannot run /bin/sh: ", what, ": ", std::strerror(err));
  return end;
}

int PollMillis(absl::Duration left) {
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 50));
}

class Command final : public HealthCheck {
 public:
  Command(std::string command, absl::Duration timeout, const std::atomic<bool>* cancel,
          GroupTracker track)
      : command_(std::move(command)),
        timeout_(timeout),
        cancel_(cancel),
        track_(std::move(track)) {}
  std::string name() const override { return command_; }
  HealthResult Run(absl::Time deadline) override {
    deadline = std::min(deadline, absl::Now() + timeout_);
    return CommandVerdict(RunHealthCommand(command_, deadline, cancel_, track_), timeout_);
  }

 private:
  std::string command_;
  absl::Duration timeout_;
  const std::atomic<bool>* cancel_;
  GroupTracker track_;
};

}  // namespace

CommandEnd RunHealthCommand(const std::string& command, absl::Time deadline,
                            const std::atomic<bool>* cancel, const GroupTracker& track) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return SpawnFailed("pipe", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a timeout kills what it started too; default signal
  // dispositions and an empty mask (the agent blocks and handles some).
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string sh = "/bin/sh";
  std::string dash_c = "-c";
  std::string cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  const int err = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return SpawnFailed("posix_spawn", err);
  }
  if (track) track(pid, true);

  OutputTail tail;
  CommandEnd end;
  bool exited = false;
  bool eof = false;
  int status = 0;
  std::optional<absl::Time> drain_until;
  char buffer[64 * 1024];
  while (true) {
    if (!exited) {
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        exited = true;
        drain_until = absl::Now() + kDrainAfterExit;
      }
    }
    const absl::Time now = absl::Now();
    if (exited && (eof || now >= *drain_until)) break;
    if (!exited && (now >= deadline || (cancel != nullptr && cancel->load()))) {
      end.timed_out = true;
      break;
    }
    if (eof) {
      // The pipe is closed but the shell still runs: wait for its exit.
      usleep(static_cast<useconds_t>(PollMillis(deadline - now)) * 1000);
      continue;
    }
    pollfd p{fds[0], POLLIN, 0};
    const absl::Time until = exited ? *drain_until : deadline;
    const int n = poll(&p, 1, PollMillis(until - now));
    if (n < 0 && errno != EINTR) break;
    if (n > 0) {
      const ssize_t got = read(fds[0], buffer, sizeof(buffer));
      if (got > 0) {
        tail.Append(std::string_view(buffer, static_cast<size_t>(got)));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof = true;
      }
    }
  }
  close(fds[0]);
  // The group: the shell on a timeout, and whatever it left behind either way.
  kill(-pid, SIGKILL);
  if (!exited) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (track) track(pid, false);
  end.output = tail.Text();
  if (!end.timed_out) {
    if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  }
  return end;
}

std::unique_ptr<HealthCheck> CommandCheck(std::string command, absl::Duration timeout,
                                          const std::atomic<bool>* cancel, GroupTracker track) {
  return std::make_unique<Command>(std::move(command), timeout, cancel, std::move(track));
}

}  // namespace dgt::agent
