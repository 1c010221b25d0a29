#include "agent/workers/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "agent/workers/fork_server.h"
#include "agent/workers/worker_group_internal.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"

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

absl::StatusOr<std::array<int, 2>> OpenLogFiles(const WorkerSpec& spec) {
  std::array<int, 2> files = {-1, -1};
  const std::string* paths[2] = {&spec.stdout_file, &spec.stderr_file};
  for (int i = 0; i < 2; ++i) {
    if (paths[i]->empty()) continue;
    // Appended to: a later round of the same attempt (nodes joined or left, not a restart)
    // writes to the same file after what the earlier round's workers wrote.
    files[i] = ::open(paths[i]->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (files[i] < 0) {
      int e = errno;
      if (i == 1 && files[0] >= 0) ::close(files[0]);
      return ErrnoToStatus(e, absl::StrCat("open ", *paths[i]));
    }
  }
  return files;
}

FilteredLog::FilteredLog(int fd, std::vector<std::string> needles)
    : fd_(fd), needles_(std::move(needles)) {}

FilteredLog::~FilteredLog() { ::close(fd_); }

absl::StatusOr<std::shared_ptr<FilteredLog>> FilteredLog::Open(const std::string& path,
                                                               std::vector<std::string> needles) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  return std::shared_ptr<FilteredLog>(new FilteredLog(fd, std::move(needles)));
}

void FilteredLog::MaybeWrite(absl::string_view prefix, absl::string_view line) {
  for (const std::string& needle : needles_) {
    if (absl::StrContains(line, needle)) {
      WriteAll(fd_, absl::StrCat(prefix, line, "\n"));
      return;
    }
  }
}

WorkerGroup::WorkerGroup(asio::io_context& io, ExitCallback on_exit, GroupCallback on_spawn,
                         GroupCallback on_reaped, ProcessLauncher* launcher)
    : io_(io),
      launcher_(launcher != nullptr ? launcher : DefaultProcessLauncher()),
      on_exit_(std::move(on_exit)),
      on_spawn_(std::move(on_spawn)),
      on_reaped_(std::move(on_reaped)),
      kill_timer_(io) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (!w->exited) {
      launcher_->SignalGroup(w->pid, SIGKILL);
      if (!w->forked) launcher_->Reap(w->pid);  // The fork server reaps its children.
    }
  }
}

absl::Status WorkerGroup::Start(const std::vector<WorkerSpec>& specs) {
  for (const WorkerSpec& spec : specs) {
    auto pid = StartOne(spec);
    if (!pid.ok()) {
      KillAll();  // The ones already started exit; their exit events follow.
      return pid.status();
    }
  }
  return absl::OkStatus();
}

void WorkerGroup::Prepare(const WorkerSpec& spec) {
  if (first_spec_ == nullptr) first_spec_ = std::make_unique<WorkerSpec>(spec);
}

absl::StatusOr<pid_t> WorkerGroup::StartOne(const WorkerSpec& spec) {
  {
    absl::StatusOr<std::array<int, 2>> opened = OpenLogFiles(spec);
    if (!opened.ok()) return opened.status();
    const std::array<int, 2> files = *opened;
    LaunchRequest request;
    request.argv = spec.argv;
    request.env = spec.env;
    request.local_rank = spec.local_rank;
    if (first_spec_ == nullptr) first_spec_ = std::make_unique<WorkerSpec>(spec);
    absl::StatusOr<LaunchedProcess> launched = launcher_->Launch(request);
    if (!launched.ok()) {
      for (int fd : files) {
        if (fd >= 0) ::close(fd);
      }
      return launched.status();
    }
    if (on_spawn_) on_spawn_(launched->pid);
    AddWorker(spec, launched->pid, files, launched->exit_fd, launched->stdout_fd,
              launched->stderr_fd);
    return launched->pid;
  }
}

WorkerGroup::Worker& WorkerGroup::AddWorker(const WorkerSpec& spec, pid_t pid,
                                            const std::array<int, 2>& files, int exit_fd,
                                            int stdout_fd, int stderr_fd) {
  auto w = std::make_unique<Worker>(io_);
  w->local_rank = spec.local_rank;
  w->rank = spec.rank;
  w->attempt = spec.attempt;
  w->pid = pid;
  w->out_file = files[0];
  w->err_file = files[1];
  w->out_console = spec.stdout_console;
  w->err_console = spec.stderr_console;
  w->prefix = spec.prefix.empty() ? absl::StrCat("[rank", spec.rank, "]: ") : spec.prefix;
  w->out_filtered = spec.stdout_filtered;
  w->err_filtered = spec.stderr_filtered;
  w->out.assign(stdout_fd);
  w->err.assign(stderr_fd);
  ++alive_;
  open_pipes_ += 2;
  workers_.push_back(std::move(w));
  Worker& ref = *workers_.back();
  if (exit_fd >= 0) {
    ref.pidfd.assign(exit_fd);
    WatchExit(ref);
  } else {
    ref.ended = true;  // A forked child already reaped by the server: its status is on the way.
  }
  Pump(ref, /*is_stderr=*/false);
  Pump(ref, /*is_stderr=*/true);
  return ref;
}

void WorkerGroup::WatchExit(Worker& w) {
  w.pidfd.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, &w](boost::system::error_code ec) {
                       if (ec) return;
                       if (!ExitFdReady(w.pidfd.native_handle())) {
                         WatchExit(w);  // A stale readiness: the process runs.
                         return;
                       }
                       if (w.forked) {
                         // Not the agent's child: the fork server reaps it and reports how.
                         w.ended = true;
                         boost::system::error_code ignored;
                         w.pidfd.close(ignored);
                         if (w.forked_status >= 0) Finish(w, w.forked_status);
                         return;
                       }
                       const int status = launcher_->Reap(w.pid);
                       if (w.standby) {
                         OnStandbyExit(w, status);
                         return;
                       }
                       Finish(w, status);
                     });
}

void WorkerGroup::Finish(Worker& w, int status) {
  if (w.exited) return;
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
  launcher_->SignalGroup(w.pid, SIGKILL);
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
}

void WorkerGroup::Pump(Worker& w, bool is_stderr) {
  auto& stream = is_stderr ? w.err : w.out;
  auto& buf = is_stderr ? w.err_buf : w.out_buf;
  stream.async_read_some(
      asio::buffer(buf), [this, &w, is_stderr](boost::system::error_code ec, size_t n) {
        StreamState& st = is_stderr ? w.err_state : w.out_state;
        std::string& partial = st.partial;
        const int fd = is_stderr ? console_err_ : console_out_;
        const bool console = is_stderr ? w.err_console : w.out_console;
        const int file = is_stderr ? w.err_file : w.out_file;
        FilteredLog* filtered = (is_stderr ? w.err_filtered : w.out_filtered).get();
        if (ec) {
          if (!partial.empty()) {
            if (console) WriteAll(fd, absl::StrCat(w.prefix, partial, "\n"));
            if (filtered != nullptr) filtered->MaybeWrite(w.prefix, partial);
            if (file >= 0) WriteAll(file, absl::StrCat(partial, "\n"));
            partial.clear();
          }
          boost::system::error_code ignored;
          (is_stderr ? w.err : w.out).close(ignored);
          PipeClosed(w);
          return;
        }
        auto& data = is_stderr ? w.err_buf : w.out_buf;
        partial.append(data.data(), n);
        // Every complete segment, each with the rank prefix, all in one write, so that no other
        // rank's output lands inside one. A '\r' segment goes out as it comes: a progress bar
        // shows without waiting for a newline.
        std::string text;
        size_t start = 0;
        for (;;) {
          const size_t end = partial.find_first_of("\r\n", start);
          if (end == std::string::npos) break;
          bool newline = partial[end] == '\n';
          size_t next = end + 1;
          if (!newline) {
            if (next == partial.size()) break;  // "\r" or "\r\n"? The next bytes tell.
            if (partial[next] == '\n') {
              newline = true;
              ++next;
            }
          }
          absl::string_view segment(partial.data() + start, end - start);
          // Shown already (previewed below, before its '\r' came) and not grown since.
          const bool shown = start == 0 && st.previewed > 0 && segment.size() == st.previewed;
          // A '\r' segment is a line too for the filtered log, as torchrun reads its files
          // with universal newlines.
          if (filtered != nullptr && (newline || !segment.empty())) {
            filtered->MaybeWrite(w.prefix, segment);
          }
          if (newline) {
            absl::StrAppend(&text, w.prefix, segment, "\n");
            if (is_stderr) {
              w.stderr_tail.emplace_back(segment);
              if (w.stderr_tail.size() > kStderrTailLines) w.stderr_tail.pop_front();
            }
          } else if (!segment.empty() && !shown) {
            absl::StrAppend(&text, w.prefix, segment, "\r");
          }
          st.carriage = !newline;
          start = next;
        }
        // The file gets the bytes as written, up to the last complete segment.
        if (file >= 0 && start > 0) WriteAll(file, partial.substr(0, start));
        partial.erase(0, start);
        if (start > 0) st.previewed = 0;
        if (partial.size() > 65536) {  // An endless line: forward it in pieces.
          absl::StrAppend(&text, w.prefix, partial, "\n");
          if (file >= 0) WriteAll(file, partial);
          if (filtered != nullptr) filtered->MaybeWrite(w.prefix, partial);
          partial.clear();
          st.previewed = 0;
        }
        // A progress bar writes "\r" + the bar: the bar is the unterminated segment. Show it
        // now, whole as read, ending in '\r' so that its next state (or its completion)
        // redraws the line.
        const bool pending_cr = !partial.empty() && partial.back() == '\r';
        const size_t visible = partial.size() - (pending_cr ? 1 : 0);
        if ((st.carriage || pending_cr) && visible > st.previewed) {
          absl::StrAppend(&text, w.prefix, absl::string_view(partial.data(), visible), "\r");
          st.previewed = visible;
        }
        if (!text.empty() && console) WriteAll(fd, text);
        Pump(w, is_stderr);
      });
}

void WorkerGroup::PipeClosed(Worker& w) {
  --w.pipes_open;
  if (w.standby) {  // Not counted until activated.
    if (w.pipes_open == 0 && w.on_pipes_closed) std::exchange(w.on_pipes_closed, nullptr)();
    return;
  }
  --open_pipes_;
  if (drained() && on_drained_) {
    auto cb = std::move(on_drained_);
    on_drained_ = nullptr;
    cb();
  }
}

void WorkerGroup::SetConsole(int stdout_fd, int stderr_fd) {
  console_out_ = stdout_fd;
  console_err_ = stderr_fd;
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
    if (!w->exited && !w->standby) launcher_->SignalGroup(w->pid, sig);
  }
}

void WorkerGroup::Stop(absl::Duration grace, int sig) {
  StopStandbys();
  Signal(sig);
  kill_timer_.expires_after(absl::ToChronoMilliseconds(grace));
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (auto& w : workers_) {
      if (!w->exited && !w->standby) {
        spdlog::warn("rank {} (pid {}) did not stop within the grace period; sending SIGKILL",
                     w->rank, w->pid);
        launcher_->SignalGroup(w->pid, SIGKILL);
      }
    }
  });
}

void WorkerGroup::KillAll() {
  kill_timer_.cancel();
  standbys_off_ = true;
  for (auto& w : workers_) launcher_->SignalGroup(w->pid, SIGKILL);
  if (fork_server_ != nullptr) fork_server_->Kill();
}

}  // namespace dgt::agent
