#include "agent/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
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

// What is pending of one output stream. Output is forwarded in segments: text up to a '\n' (a
// line), or up to a '\r' (a progress bar redrawing its line, as tqdm writes "\r 10%|█ |").
struct StreamState {
  std::string partial;    // The current segment, not terminated yet.
  size_t previewed = 0;   // Leading bytes of `partial` already shown on the console.
  bool carriage = false;  // The last segment ended with '\r': the stream draws a progress bar.
};

struct WorkerGroup::Worker {
  Worker(asio::io_context& io) : pidfd(io), out(io), err(io), channel(io) {}
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
  // A standby until activated; `ready` once it wrote "ready\n" on its channel.
  bool standby = false;
  bool ready = false;
  std::vector<std::string> argv;  // A standby's, to extend at activation.
  int pipes_open = 2;             // Its stdout and stderr pipes not at EOF yet.
  std::string prefix;
  std::shared_ptr<FilteredLog> out_filtered;
  std::shared_ptr<FilteredLog> err_filtered;
  asio::posix::stream_descriptor pidfd;
  asio::posix::stream_descriptor out;
  asio::posix::stream_descriptor err;
  asio::posix::stream_descriptor channel;  // A standby's; closed once activated.
  std::string channel_data;
  std::array<char, 64> channel_buf;
  StreamState out_state;
  StreamState err_state;
  std::array<char, 16384> out_buf;
  std::array<char, 16384> err_buf;
  std::deque<std::string> stderr_tail;
};

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
      launcher_->Reap(w->pid);
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

absl::StatusOr<pid_t> WorkerGroup::StartOne(const WorkerSpec& spec) {
  {
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
    const pid_t pid = launched->pid;
    if (on_spawn_) on_spawn_(pid);
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
    const int pidfd = launched->exit_fd;
    const int out_pipe[2] = {launched->stdout_fd, -1};
    const int err_pipe[2] = {launched->stderr_fd, -1};
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
                       const int status = launcher_->Reap(w.pid);
                       if (w.standby) {
                         OnStandbyExit(w, status);
                         return;
                       }
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
                     });
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
  if (w.standby) return;  // Not counted until activated.
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
}

// ---------------------------------------------------------------------------------------------
// Warm standbys.

absl::Status WorkerGroup::StartStandbys(int count) {
  if (count <= 0 || standbys_off_) return absl::OkStatus();
  if (first_spec_ == nullptr) {
    return absl::FailedPreconditionError("standbys start like a worker: none was started yet");
  }
  if (standby_spec_ == nullptr) {
    auto spec = std::make_unique<WorkerSpec>();
    spec->argv = first_spec_->argv;
    const std::string local_rank_arg = absl::StrCat("--local_rank=", first_spec_->local_rank);
    if (!spec->argv.empty() && spec->argv.back() == local_rank_arg) spec->argv.pop_back();
    for (const std::string& kv : first_spec_->env) {
      const absl::string_view key = absl::string_view(kv).substr(0, kv.find('='));
      bool dropped = key == "DGT_STANDBY" || key == "DGT_STANDBY_FD";
      for (const char* name : kStandbyDroppedEnv) dropped |= key == name;
      if (!dropped) spec->env.push_back(kv);
    }
    spec->env.emplace_back("DGT_STANDBY=1");
    spec->env.push_back(absl::StrCat("DGT_STANDBY_FD=", kStandbyChannelFd));
    spec->stdout_console = first_spec_->stdout_console;
    spec->stderr_console = first_spec_->stderr_console;
    standby_spec_ = std::move(spec);
    standby_respawns_left_ = count;
  }
  standby_target_ = count;
  while (standbys() < standby_target_) {
    if (absl::Status s = LaunchStandby(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

int WorkerGroup::standbys() const {
  int n = 0;
  for (const auto& w : workers_) n += w->standby && !w->exited ? 1 : 0;
  return n;
}

int WorkerGroup::standbys_ready() const {
  int n = 0;
  for (const auto& w : workers_) n += w->standby && !w->exited && w->ready ? 1 : 0;
  return n;
}

absl::Status WorkerGroup::LaunchStandby() {
  LaunchRequest request;
  request.argv = standby_spec_->argv;
  request.env = standby_spec_->env;
  request.local_rank = -1;
  request.standby_channel = true;
  absl::StatusOr<LaunchedProcess> launched = launcher_->Launch(request);
  if (!launched.ok()) return launched.status();
  if (on_spawn_) on_spawn_(launched->pid);
  auto w = std::make_unique<Worker>(io_);
  w->standby = true;
  w->local_rank = -1;
  w->rank = -1;
  w->pid = launched->pid;
  w->argv = standby_spec_->argv;
  w->out_console = standby_spec_->stdout_console;
  w->err_console = standby_spec_->stderr_console;
  w->prefix = absl::StrCat("[standby", next_standby_index_++, "]: ");
  w->pidfd.assign(launched->exit_fd);
  w->out.assign(launched->stdout_fd);
  w->err.assign(launched->stderr_fd);
  w->channel.assign(launched->channel_fd);
  workers_.push_back(std::move(w));
  Worker& ref = *workers_.back();
  spdlog::debug("dgt-run: started standby pid {}", ref.pid);
  WatchExit(ref);
  Pump(ref, /*is_stderr=*/false);
  Pump(ref, /*is_stderr=*/true);
  ReadChannel(ref);
  return absl::OkStatus();
}

void WorkerGroup::ReadChannel(Worker& w) {
  w.channel.async_read_some(
      asio::buffer(w.channel_buf), [this, &w](boost::system::error_code ec, size_t n) {
        if (ec) return;  // EOF (the standby is exiting: its exit event follows) or closed here.
        w.channel_data.append(w.channel_buf.data(), n);
        if (w.channel_data.find('\n') == std::string::npos) {
          if (w.channel_data.size() < w.channel_buf.size()) ReadChannel(w);
          return;  // Garbage without a newline is never taken for ready.
        }
        if (w.channel_data == "ready\n" && w.standby && !w.exited) {
          w.ready = true;
          spdlog::info("dgt-run: standby pid {} is ready", w.pid);
        } else {
          spdlog::warn("dgt-run: standby pid {} wrote '{}' on its channel, not 'ready'; not used",
                       w.pid, absl::CEscape(w.channel_data));
        }
      });
}

void WorkerGroup::OnStandbyExit(Worker& w, int status) {
  w.exited = true;
  launcher_->SignalGroup(w.pid, SIGKILL);  // Its leftovers, as a worker's.
  if (on_reaped_) on_reaped_(w.pid);
  boost::system::error_code ignored;
  w.pidfd.close(ignored);
  w.channel.close(ignored);
  if (standbys_off_) return;  // Stopped here.
  const std::string how = WIFSIGNALED(status)
                              ? absl::StrCat("was killed by signal ", WTERMSIG(status))
                              : absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (!w.ready) {
    spdlog::warn(
        "dgt-run: standby pid {} {} before it reported ready; no more standbys for this round "
        "(--standby-workers needs a Python script that imports dgt.recovery, docs/RECOVERY.md)",
        w.pid, how);
    StopStandbys();
    return;
  }
  if (standby_respawns_left_ <= 0) {
    spdlog::warn("dgt-run: standby pid {} {}; standbys died too often, none is started again",
                 w.pid, how);
    StopStandbys();
    return;
  }
  --standby_respawns_left_;
  spdlog::warn("dgt-run: standby pid {} {}; starting another", w.pid, how);
  TopUpStandbysLater();
}

void WorkerGroup::TopUpStandbysLater() {
  // Not from inside the handler that closed a standby's channel: Asio may still hold that
  // descriptor's readiness from the same epoll batch, and a descriptor registered now can
  // reuse its state and get that stale readiness (seen: a new standby's exit event fired).
  asio::post(io_, [this, life = std::weak_ptr<int>(life_)] {
    if (life.expired()) return;
    if (absl::Status s = StartStandbys(standby_target_); !s.ok()) {
      spdlog::warn("dgt-run: cannot start a standby: {}", s.message());
      StopStandbys();
    }
  });
}

absl::StatusOr<pid_t> WorkerGroup::ActivateStandby(const WorkerSpec& spec) {
  Worker* chosen = nullptr;
  for (auto& w : workers_) {
    if (w->standby && w->ready && !w->exited) {
      chosen = w.get();
      break;
    }
  }
  if (chosen == nullptr) return absl::NotFoundError("no standby is ready");
  Worker& w = *chosen;
  if (spec.argv.size() < w.argv.size() ||
      !std::equal(w.argv.begin(), w.argv.end(), spec.argv.begin())) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", spec.rank, "'s command does not extend the standbys' command"));
  }
  // A standby may have initialized CUDA while importing (torch._dynamo), which fixes the devices
  // it sees: with per-rank CUDA_VISIBLE_DEVICES (--virtual-local-rank) it cannot become a rank
  // that sees other ones.
  auto visible_devices = [](const std::vector<std::string>& env) {
    for (const std::string& kv : env) {
      if (absl::StartsWith(kv, "CUDA_VISIBLE_DEVICES=")) return kv;
    }
    return std::string();
  };
  if (visible_devices(spec.env) != visible_devices(standby_spec_->env)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", spec.rank, "'s CUDA_VISIBLE_DEVICES differs from the standbys'"));
  }
  nlohmann::json env = nlohmann::json::object();
  for (const std::string& kv : spec.env) {
    const size_t eq = kv.find('=');
    env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  nlohmann::json message = {
      {"env", env},
      {"argv_append",
       std::vector<std::string>(spec.argv.begin() + static_cast<std::ptrdiff_t>(w.argv.size()),
                                spec.argv.end())}};
  // Env values are the user's bytes, not always UTF-8: replace what is not, rather than throw.
  const std::string text =
      message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
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
  // The standby waits in a read: the whole line fits the socket's buffer (an environment of
  // hundreds of KiB would not, and is then sent by a fresh spawn instead).
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::send(w.channel.native_handle(), text.data() + off, text.size() - off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  boost::system::error_code ignored;
  w.channel.close(ignored);
  if (off < text.size()) {
    for (int fd : files) {
      if (fd >= 0) ::close(fd);
    }
    spdlog::warn("dgt-run: cannot hand rank {} to standby pid {}; killing it", spec.rank, w.pid);
    launcher_->SignalGroup(w.pid, SIGKILL);  // Its exit starts another standby.
    return absl::UnavailableError(
        absl::StrCat("standby pid ", w.pid, " did not take rank ", spec.rank));
  }
  w.standby = false;
  w.local_rank = spec.local_rank;
  w.rank = spec.rank;
  w.attempt = spec.attempt;
  w.out_file = files[0];
  w.err_file = files[1];
  w.out_console = spec.stdout_console;
  w.err_console = spec.stderr_console;
  w.prefix = spec.prefix.empty() ? absl::StrCat("[rank", spec.rank, "]: ") : spec.prefix;
  w.out_filtered = spec.stdout_filtered;
  w.err_filtered = spec.stderr_filtered;
  ++alive_;
  open_pipes_ += w.pipes_open;
  const pid_t pid = w.pid;
  spdlog::info("dgt-run: standby pid {} takes rank {} (local rank {})", pid, spec.rank,
               spec.local_rank);
  TopUpStandbysLater();
  return pid;
}

absl::StatusOr<pid_t> WorkerGroup::StartReplacement(const WorkerSpec& spec) {
  absl::StatusOr<pid_t> pid = ActivateStandby(spec);
  if (pid.ok()) return pid;
  if (standby_target_ > 0) {
    spdlog::info("dgt-run: rank {}: {}; starting a fresh process", spec.rank,
                 pid.status().message());
  }
  return StartOne(spec);
}

void WorkerGroup::StopStandbys() {
  standbys_off_ = true;
  for (auto& w : workers_) {
    if (w->standby && !w->exited) launcher_->SignalGroup(w->pid, SIGKILL);
  }
}

}  // namespace dgt::agent
