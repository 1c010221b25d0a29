#include "agent/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/logging.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // The console went away; workers keep running.
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string WorkerExit::Describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return absl::StrCat("was killed by signal ", signal, " (SIG", name ? name : "?", ")");
  }
  return absl::StrCat("exited with code ", exit_code);
}

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

struct WorkerGroup::Worker {
  Worker(asio::io_context& io) : pidfd(io), out(io), err(io) {}
  ~Worker() {
    if (out_file >= 0) ::close(out_file);
    if (err_file >= 0) ::close(err_file);
  }
  int local_rank = 0;
  int rank = 0;
  int attempt = 0;
  pid_t pid = 0;
  int out_file = -1;
  int err_file = -1;
  bool out_console = true;
  bool err_console = true;
  bool exited = false;
  std::string prefix;
  asio::posix::stream_descriptor pidfd;
  asio::posix::stream_descriptor out;
  asio::posix::stream_descriptor err;
  std::string out_partial;
  std::string err_partial;
  std::array<char, 16384> out_buf;
  std::array<char, 16384> err_buf;
  std::deque<std::string> stderr_tail;
};

WorkerGroup::WorkerGroup(asio::io_context& io, ExitCallback on_exit, GroupCallback on_spawn,
                         GroupCallback on_reaped)
    : io_(io),
      on_exit_(std::move(on_exit)),
      on_spawn_(std::move(on_spawn)),
      on_reaped_(std::move(on_reaped)),
      kill_timer_(io) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (!w->exited) {
      ::kill(-w->pid, SIGKILL);
      ::waitpid(w->pid, nullptr, 0);
    }
  }
}

absl::Status WorkerGroup::Start(const std::vector<WorkerSpec>& specs) {
  for (const WorkerSpec& spec : specs) {
    auto pid = StartOne(spec);
    if (!pid.ok()) return pid.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<pid_t> WorkerGroup::StartOne(const WorkerSpec& spec) {
  const pid_t agent_pid = ::getpid();
  {
    auto exe = ResolveExecutable(spec.argv.at(0));
    if (!exe.ok()) return exe.status();
    int files[2] = {-1, -1};
    const std::string* paths[2] = {&spec.stdout_file, &spec.stderr_file};
    for (int i = 0; i < 2; ++i) {
      if (paths[i]->empty()) continue;
      files[i] = ::open(paths[i]->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (files[i] < 0) {
        int e = errno;
        if (i == 1 && files[0] >= 0) ::close(files[0]);
        return ErrnoToStatus(e, absl::StrCat("open ", *paths[i]));
      }
    }
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<char*> argv, envp;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      for (int fd : files) if (fd >= 0) ::close(fd);
      return ErrnoToStatus(e, "pipe2");
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      for (int fd : files) if (fd >= 0) ::close(fd);
      return ErrnoToStatus(e, "pipe2");
    }
    const std::string exec_error =
        absl::StrCat("dgt-run: cannot execute '", *exe, "' for local rank ", spec.local_rank,
                     "\n");
    pid_t pid = ::fork();
    if (pid < 0) {
      int e = errno;
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      for (int fd : files) if (fd >= 0) ::close(fd);
      return ErrnoToStatus(e, "fork");
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != agent_pid) ::_exit(126);  // The agent died before prctl took effect.
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      ::execve(exe->c_str(), argv.data(), envp.data());
      ssize_t ignored = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // Also in the parent, so a signal sent at once reaches the group.
    if (on_spawn_) on_spawn_(pid);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    auto w = std::make_unique<Worker>(io_);
    w->local_rank = spec.local_rank;
    w->rank = spec.rank;
    w->attempt = spec.attempt;
    w->pid = pid;
    w->out_file = files[0];
    w->err_file = files[1];
    w->out_console = spec.stdout_console;
    w->err_console = spec.stderr_console;
    w->prefix = absl::StrCat("[rank", spec.rank, "]: ");
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) {
      int e = errno;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      if (on_reaped_) on_reaped_(pid);
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      return ErrnoToStatus(e, "pidfd_open");
    }
    w->pidfd.assign(pidfd);
    w->out.assign(out_pipe[0]);
    w->err.assign(err_pipe[0]);
    ++alive_;
    open_pipes_ += 2;
    workers_.push_back(std::move(w));
    Worker& ref = *workers_.back();
    WatchExit(ref);
    Pump(ref, /*is_stderr=*/false);
    Pump(ref, /*is_stderr=*/true);
    return pid;
  }
}

void WorkerGroup::WatchExit(Worker& w) {
  w.pidfd.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, &w](boost::system::error_code ec) {
                       if (ec) return;
                       int status = 0;
                       pid_t r;
                       do {
                         r = ::waitpid(w.pid, &status, 0);
                       } while (r < 0 && errno == EINTR);
                       WorkerExit exit;
                       exit.local_rank = w.local_rank;
                       exit.rank = w.rank;
                       exit.attempt = w.attempt;
                       exit.pid = w.pid;
                       exit.time = absl::Now();
                       if (WIFSIGNALED(status)) {
                         exit.signal = WTERMSIG(status);
                       } else {
                         exit.exit_code = WEXITSTATUS(status);
                       }
                       exit.stderr_tail = w.stderr_tail;
                       w.exited = true;
                       // No grandchild outlives its worker: kill what is left of the group.
                       ::kill(-w.pid, SIGKILL);
                       if (on_reaped_) on_reaped_(w.pid);
                       boost::system::error_code ignored;
                       w.pidfd.close(ignored);
                       --alive_;
                       on_exit_(exit);
                       if (drained() && on_drained_) {
                         auto cb = std::move(on_drained_);
                         on_drained_ = nullptr;
                         cb();
                       }
                     });
}

void WorkerGroup::Pump(Worker& w, bool is_stderr) {
  auto& stream = is_stderr ? w.err : w.out;
  auto& buf = is_stderr ? w.err_buf : w.out_buf;
  stream.async_read_some(
      asio::buffer(buf), [this, &w, is_stderr](boost::system::error_code ec, size_t n) {
        std::string& partial = is_stderr ? w.err_partial : w.out_partial;
        const int fd = is_stderr ? STDERR_FILENO : STDOUT_FILENO;
        const bool console = is_stderr ? w.err_console : w.out_console;
        const int file = is_stderr ? w.err_file : w.out_file;
        if (ec) {
          if (!partial.empty()) {
            if (console) WriteAll(fd, absl::StrCat(w.prefix, partial, "\n"));
            if (file >= 0) WriteAll(file, absl::StrCat(partial, "\n"));
            partial.clear();
          }
          boost::system::error_code ignored;
          (is_stderr ? w.err : w.out).close(ignored);
          PipeClosed();
          return;
        }
        auto& data = is_stderr ? w.err_buf : w.out_buf;
        partial.append(data.data(), n);
        if (file >= 0) {
          // The file gets the bytes as written, up to the last complete line.
          size_t last_nl = partial.rfind('\n');
          if (last_nl != std::string::npos) WriteAll(file, partial.substr(0, last_nl + 1));
        }
        // Forward complete lines only, all of them in one write, so lines never interleave.
        std::string lines;
        size_t start = 0;
        for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
          absl::string_view line(partial.data() + start, nl - start);
          absl::StrAppend(&lines, w.prefix, line, "\n");
          if (is_stderr) {
            w.stderr_tail.emplace_back(line);
            if (w.stderr_tail.size() > kStderrTailLines) w.stderr_tail.pop_front();
          }
        }
        partial.erase(0, start);
        if (partial.size() > 65536) {  // An endless line: forward it in pieces.
          absl::StrAppend(&lines, w.prefix, partial, "\n");
          if (file >= 0) WriteAll(file, partial);
          partial.clear();
        }
        if (!lines.empty() && console) WriteAll(fd, lines);
        Pump(w, is_stderr);
      });
}

void WorkerGroup::PipeClosed() {
  --open_pipes_;
  if (drained() && on_drained_) {
    auto cb = std::move(on_drained_);
    on_drained_ = nullptr;
    cb();
  }
}

void WorkerGroup::OnDrained(std::function<void()> callback) {
  if (drained()) {
    callback();
    return;
  }
  on_drained_ = std::move(callback);
}

void WorkerGroup::Signal(int sig) {
  for (auto& w : workers_) {
    if (!w->exited) ::kill(-w->pid, sig);
  }
}

void WorkerGroup::Stop(absl::Duration grace, int sig) {
  Signal(sig);
  kill_timer_.expires_after(absl::ToChronoMilliseconds(grace));
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (auto& w : workers_) {
      if (!w->exited) {
        spdlog::warn("rank {} (pid {}) did not stop within the grace period; sending SIGKILL",
                     w->rank, w->pid);
        ::kill(-w->pid, SIGKILL);
      }
    }
  });
}

void WorkerGroup::KillAll() {
  kill_timer_.cancel();
  for (auto& w : workers_) ::kill(-w->pid, SIGKILL);
}

}  // namespace dgt::agent
