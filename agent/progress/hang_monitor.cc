#include "agent/progress/hang_monitor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/progress_channel.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

// How often a stack dump's file is checked while it is written.
constexpr absl::Duration kDumpCheck = absl::Milliseconds(10);

int64_t FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

std::string ReadHead(const std::string& path, size_t max) {
  std::ifstream in(path, std::ios::binary);
  std::string text(max, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

char ProcessState(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

bool IsStopped(pid_t pid) {
  const char state = ProcessState(pid);
  return state == 'T' || state == 't';
}

// The process that registered slot `slot`'s stack dump: the worker `worker`, or a process it
// started (a shell wrapper's Python). Only one in the worker's session (the worker calls
// setsid()), so a stale or foreign pid in the slot is never signalled. 0 when none.
pid_t RegisteredPid(const ProgressFile& file, int slot, pid_t worker) {
  const pid_t pid = file.StacksPid(slot);
  if (pid <= 0) return 0;
  return pid == worker || ::getsid(pid) == worker ? pid : 0;
}

HangMonitor::HangMonitor(asio::io_context& io, Options options, const Clock* clock,
                         ProcessLauncher* launcher)
    : io_(io),
      options_(options),
      clock_(clock),
      launcher_(launcher),
      detector_(options.detector),
      poll_timer_(io) {}

HangMonitor::~HangMonitor() { Stop(); }

absl::Status HangMonitor::Open(const std::string& dir, int slots) {
  if (!enabled() || file_) return absl::OkStatus();
  auto file = ProgressFile::Create((std::filesystem::path(dir) / "progress").string(), slots);
  if (!file.ok()) return file.status();
  file_ = std::move(*file);
  return absl::OkStatus();
}

void HangMonitor::Prepare(int local_rank, const std::string& stacks_file, EnvMap* env) {
  if (!file_) return;
  file_->Reset(local_rank);
  (*env)[kProgressFileEnv] = file_->path();
  (*env)[kProgressSlotEnv] = absl::StrCat(local_rank);
  stacks_files_[local_rank] = stacks_file;
  if (!stacks_file.empty()) {
    (*env)[kStacksSignalEnv] = absl::StrCat(SIGRTMIN + kStacksSignalOffset);
    (*env)[kStacksFileEnv] = stacks_file;
  }
}

void HangMonitor::Started(int local_rank, int rank, pid_t pid) {
  if (!file_ || stopped_) return;
  Watched w;
  w.rank = rank;
  w.pid = pid;
  w.stacks_file = stacks_files_[local_rank];
  watched_[local_rank] = std::move(w);
  detector_.Watch(local_rank, clock_->Now());
  ArmPoll();
}

void HangMonitor::Exited(int local_rank, pid_t pid) {
  declared_.erase(pid);  // A later process may get its pid.
  auto it = watched_.find(local_rank);
  if (it == watched_.end() || it->second.pid != pid) return;
  watched_.erase(it);
  detector_.Forget(local_rank);
}

void HangMonitor::ForgetAll() {
  for (const auto& [local_rank, w] : watched_) detector_.Forget(local_rank);
  watched_.clear();
}

const HangReport* HangMonitor::ReportFor(pid_t pid) const {
  auto it = reports_.find(pid);
  return it == reports_.end() ? nullptr : &it->second;
}

int HangMonitor::DeclaredOrder(pid_t pid) const {
  auto it = declared_.find(pid);
  return it == declared_.end() ? 0 : it->second.order;
}

absl::Time HangMonitor::DeclaredAt(pid_t pid) const {
  auto it = declared_.find(pid);
  return it == declared_.end() ? absl::InfinitePast() : it->second.at;
}

void HangMonitor::Stop() {
  stopped_ = true;
  poll_timer_.cancel();
  watched_.clear();
}

void HangMonitor::ArmPoll() {
  if (polling_ || stopped_ || watched_.empty()) return;
  polling_ = true;
  poll_timer_.expires_after(absl::ToChronoNanoseconds(detector_.PollPeriod()));
  poll_timer_.async_wait([this](boost::system::error_code ec) {
    polling_ = false;
    if (ec || stopped_) return;
    Poll();
    ArmPoll();
  });
}

void HangMonitor::Poll() {
  const absl::Time now = clock_->Now();
  std::vector<std::pair<Hang, Watched>> hung;
  for (auto it = watched_.begin(); it != watched_.end();) {
    const int local_rank = it->first;
    const pid_t pid = it->second.pid;
    // Stopped: the worker, or the process of it that reports (a shell wrapper's Python).
    std::optional<Hang> hang =
        detector_.Check(local_rank, file_->Read(local_rank), now, [this, local_rank, pid] {
          const pid_t reporter = RegisteredPid(*file_, local_rank, pid);
          return IsStopped(pid) || (reporter > 0 && IsStopped(reporter));
        });
    if (!hang) {
      ++it;
      continue;
    }
    hung.emplace_back(*hang, std::move(it->second));
    it = watched_.erase(it);
  }
  // Peers blocked on a hung rank may fall silent with it: the likeliest cause is declared first.
  std::sort(hung.begin(), hung.end(),
            [](const auto& a, const auto& b) { return BlameBefore(a.first, b.first); });
  for (const auto& [hang, w] : hung) OnHang(hang, w);
}

void HangMonitor::OnHang(const Hang& hang, const Watched& w) {
  HangReport report;
  report.reason = hang.Describe();
  const pid_t dump_pid = w.stacks_file.empty() ? 0 : RegisteredPid(*file_, hang.local_rank, w.pid);
  const bool stopped = IsStopped(w.pid) || (dump_pid > 0 && IsStopped(dump_pid));
  const bool dump = !stopped && dump_pid > 0;
  if (stopped) {
    absl::StrAppend(&report.reason, " (stopped: SIGSTOP)");
    report.note = "stopped (SIGSTOP), no stacks";
  } else if (!dump) {
    report.note =
        "no stacks: the worker did not register dgt's stack dump (a non-Python worker, or one "
        "that does not import dgt)";
  }
  const absl::Time declared_at = absl::Now();
  declared_[w.pid] = Declared{++declared_count_, declared_at};
  // Known before the kill: a stop of every worker may reap this one before its dump is written.
  HangReport declared = report;
  if (dump) declared.note = "no stacks: it ended before its stack dump was written";
  reports_[w.pid] = std::move(declared);
  // Wall-clock nanoseconds, to line up with the workers' own timestamps.
  spdlog::warn("dgt-run: rank {} (local rank {}, pid {}) hung: {}; {} (detected_ns={})", w.rank,
               hang.local_rank, w.pid, report.reason,
               stopped ? "it is stopped, no stacks; SIGKILL"
                       : (dump ? "writing its stacks, then SIGKILL"
                               : "it registered no stack dump; SIGKILL"),
               absl::ToUnixNanos(declared_at));
  if (!dump) {
    Kill(w, std::move(report));
    return;
  }
  if (::kill(dump_pid, SIGRTMIN + kStacksSignalOffset) != 0) {
    report.note = "no stacks: the worker could not be signalled";
    Kill(w, std::move(report));
    return;
  }
  AwaitDump(w, std::move(report), clock_->Now() + options_.dump_wait, -1);
}

void HangMonitor::AwaitDump(Watched w, HangReport report, absl::Time deadline, int64_t last_size) {
  const int64_t size = FileSize(w.stacks_file);
  // Written once it is there and stopped growing for a check; or give up at the deadline.
  if ((size > 0 && size == last_size) || clock_->Now() >= deadline) {
    if (size > 0) {
      report.stacks_file = w.stacks_file;
      report.stacks = ReadHead(w.stacks_file, kMaxStacksBytes);
    } else {
      report.note =
          absl::StrCat("no stacks: none written within ", absl::FormatDuration(options_.dump_wait));
    }
    Kill(w, std::move(report));
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(io_);
  timer->expires_after(absl::ToChronoNanoseconds(kDumpCheck));
  std::weak_ptr<int> life = life_;
  timer->async_wait([this, life, timer, w = std::move(w), report = std::move(report), deadline,
                     size](boost::system::error_code ec) mutable {
    if (ec || life.expired()) return;
    AwaitDump(std::move(w), std::move(report), deadline, size);
  });
}

void HangMonitor::Kill(const Watched& w, HangReport report) {
  launcher_->SignalGroup(w.pid, SIGKILL);
  if (!report.stacks.empty()) {
    // Shown now too: a rank restarted in place leaves no failure summary behind.
    std::string stacks = report.stacks;
    while (!stacks.empty() && stacks.back() == '\n') stacks.pop_back();
    spdlog::warn("dgt-run: stacks of rank {} (pid {}, {}):\n  {}", w.rank, w.pid, w.stacks_file,
                 absl::StrReplaceAll(stacks, {{"\n", "\n  "}}));
  }
  reports_[w.pid] = std::move(report);
}

}  // namespace dgt::agent
