// WorkerGroup's warm standbys (--standby-workers; docs/RECOVERY.md "Warm standbys"): processes
// of the job's command waiting in `import dgt.recovery` until a failed rank's environment arrives
// on their channel (descriptor 3).
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/workers/fork_server.h"
#include "agent/workers/worker_group.h"
#include "agent/workers/worker_group_internal.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"

namespace dgt::agent {

namespace asio = boost::asio;

bool LooksLikePython(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  absl::string_view name = argv[0];
  if (const size_t slash = name.rfind('/'); slash != absl::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  if (!absl::ConsumePrefix(&name, "python")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
}

void AddEnvToMessage(const std::vector<std::string>& env_entries, nlohmann::json* message) {
  // Env entries are the user's bytes, not always UTF-8, which JSON strings must be: an entry
  // that is not goes base64-encoded, key and value, in "env_b64" (python/dgt decodes it to the
  // same bytes), the others as plain strings in "env".
  auto is_utf8 = [](const std::string& text) {
    const nlohmann::json j = text;  // Dumps differ only where a byte is not valid UTF-8.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore) ==
           j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  nlohmann::json env = nlohmann::json::object();
  nlohmann::json env_b64 = nlohmann::json::array();
  for (const std::string& kv : env_entries) {
    const size_t eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (is_utf8(key) && is_utf8(value)) {
      env[key] = std::move(value);
    } else {
      env_b64.push_back({absl::Base64Escape(key), absl::Base64Escape(value)});
    }
  }
  (*message)["env"] = std::move(env);
  if (!env_b64.empty()) (*message)["env_b64"] = std::move(env_b64);
}

// ---------------------------------------------------------------------------------------------
// Warm standbys.

absl::Status WorkerGroup::StartStandbys(int count) {
  if (count <= 0 || standbys_off_) return absl::OkStatus();
  if (first_spec_ == nullptr) {
    return absl::FailedPreconditionError("standbys start like a worker: none was started yet");
  }
  if (standby_spec_ == nullptr) {
    // A standby waits for its rank only in `import dgt.recovery`: any other program runs its
    // whole job without a rank (its side effects happen once more per standby), so none starts.
    if (!LooksLikePython(first_spec_->argv)) {
      StopStandbys();
      return absl::FailedPreconditionError(absl::StrCat(
          "none started: the command '", first_spec_->argv.empty() ? "" : first_spec_->argv[0],
          "' is not a Python interpreter (a standby must be a Python script that imports "
          "dgt.recovery, docs/RECOVERY.md \"Warm standbys\"; with --no-python it would run the "
          "whole program without a rank)"));
    }
    auto spec = std::make_unique<WorkerSpec>();
    spec->argv = first_spec_->argv;
    const std::string local_rank_arg = absl::StrCat("--local_rank=", first_spec_->local_rank);
    if (!spec->argv.empty() && spec->argv.back() == local_rank_arg) spec->argv.pop_back();
    spec->env = EnvWithoutRank(first_spec_->env);
    spec->env.emplace_back("DGT_STANDBY=1");
    spec->env.push_back(absl::StrCat("DGT_STANDBY_FD=", kStandbyChannelFd));
    spec->stdout_console = first_spec_->stdout_console;
    spec->stderr_console = first_spec_->stderr_console;
    standby_spec_ = std::move(spec);
    standby_respawns_left_ = count;
  }
  standby_target_ = count;
  return LaunchStandbyBatch();
}

absl::Status WorkerGroup::LaunchStandbyBatch() {
  // As the agent starts workers (NodeWorkers::SpawnFrom): a few ms of fork/exec each, so at most
  // kStandbyBatch per turn of the loop and the rest posted, so that a stop signal (which stops
  // the standbys) or a worker's exit is handled between batches, not after thousands of spawns.
  for (int i = 0; i < kStandbyBatch && standbys() < standby_target_; ++i) {
    if (absl::Status s = LaunchStandby(); !s.ok()) return s;
  }
  if (standbys() < standby_target_ && !standby_batch_posted_) {
    standby_batch_posted_ = true;
    asio::post(io_, [this, life = std::weak_ptr<int>(life_)] {
      if (life.expired()) return;
      standby_batch_posted_ = false;
      if (standbys_off_) return;
      if (absl::Status s = LaunchStandbyBatch(); !s.ok()) {
        spdlog::warn("dgt-run: cannot start a standby: {}", s.message());
        StopStandbys();
      }
    });
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
  if (!w.ready && !WIFSIGNALED(status)) {
    // It ended on its own without waiting for a rank: the script does not reach
    // `import dgt.recovery` (or failed before: no module dgt, ...). Another would do the same.
    // Its last stderr lines say why (with -r/--local-ranks-filter they reached no console and
    // no file): the warning waits for its stderr to reach EOF.
    StopStandbys();
    const pid_t pid = w.pid;
    const int code = WEXITSTATUS(status);
    w.on_pipes_closed = [&w, pid, code] {
      std::string tail;
      for (const std::string& line : w.stderr_tail) absl::StrAppend(&tail, "\n  ", line);
      spdlog::warn(
          "dgt-run: standby pid {} exited with code {} before it reported ready{}; no more "
          "standbys for this round (a standby must be a Python script that imports "
          "dgt.recovery before it reads its rank, docs/RECOVERY.md \"Warm standbys\"){}",
          pid, code, code == 0 ? " (it ran the script without a rank)" : "",
          tail.empty() ? std::string(" (it wrote nothing on stderr)")
                       : absl::StrCat("; its last stderr lines:", tail));
    };
    if (w.pipes_open == 0) std::exchange(w.on_pipes_closed, nullptr)();
    return;
  }
  // Killed from outside (the OOM killer, a SIGKILL), ready or not: replaced, a bounded number
  // of times.
  if (standby_respawns_left_ <= 0) {
    spdlog::warn("dgt-run: standby pid {} {}; standbys died too often, none is started again",
                 w.pid, how);
    StopStandbys();
    return;
  }
  --standby_respawns_left_;
  spdlog::warn("dgt-run: standby pid {} {}{}; starting another", w.pid, how,
               w.ready ? "" : " before it reported ready");
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
  nlohmann::json message = nlohmann::json::object();
  AddEnvToMessage(spec.env, &message);
  message["argv_append"] = std::vector<std::string>(
      spec.argv.begin() + static_cast<std::ptrdiff_t>(w.argv.size()), spec.argv.end());
  // Arguments are not checked: a rank's extra argument is dgt-run's "--local_rank=N".
  const std::string text =
      message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  absl::StatusOr<std::array<int, 2>> opened = OpenLogFiles(spec);
  if (!opened.ok()) return opened.status();
  const std::array<int, 2> files = *opened;
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
  } else if (fork_server_ != nullptr) {
    if (fork_server_->ready()) {
      pid = StartForked(spec);
      if (pid.ok()) return pid;
      spdlog::warn("dgt-run: rank {}: {}; starting a fresh process", spec.rank,
                   pid.status().message());
    } else if (!fork_fallback_logged_) {
      fork_fallback_logged_ = true;
      spdlog::info("dgt-run: rank {}: the fork server is {}; starting a fresh process", spec.rank,
                   fork_server_->gone() ? "gone" : "not ready");
    }
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
