#include "daemon/job_runner.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/logging.h"

namespace dgt::daemon {
namespace {

// Writes "`msg`: <errno text>\n" to fd 2 in a forked child (async-signal-safe: strerrordesc_np
// returns a static string, no locale) and exits with `code`.
[[noreturn]] void ChildFail(const char* msg, int err, int code) {
  const char* desc = ::strerrordesc_np(err);
  for (const char* part : {msg, ": ", desc != nullptr ? desc : "unknown error", "\n"}) {
    if (::write(2, part, std::strlen(part)) < 0) {
      // Nothing else to do in a child that failed.
    }
  }
  ::_exit(code);
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The uid in <dir>/job-uid, "" when there is no such file.
std::string ReadUid(const std::string& dir) {
  std::ifstream in(absl::StrCat(dir, "/", kJobUidFile));
  std::string uid;
  if (in) std::getline(in, uid);
  return std::string(absl::StripAsciiWhitespace(uid));
}

}  // namespace

std::string LastReasonLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > 4096 ? size - 4096 : 0;
  in.seekg(start);
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string last;
  for (absl::string_view line : absl::StrSplit(tail, '\n')) {
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.empty()) continue;
    // spdlog's "[time] [level] text": only warnings and errors say why dgt-run ended.
    if (absl::ConsumePrefix(&t, "[")) {
      const size_t close = t.find("] [");
      if (close != absl::string_view::npos) {
        absl::string_view level = t.substr(close + 3);
        if (absl::StartsWith(level, "info]") || absl::StartsWith(level, "debug]") ||
            absl::StartsWith(level, "trace]")) {
          continue;
        }
      }
      last = absl::StrCat("[", t);
      continue;
    }
    last = std::string(t);
  }
  return last;
}

absl::StatusOr<std::string> PrepareJobDir(const std::string& job_dir, const std::string& uid) {
  std::string moved;
  struct stat st {};
  if (!uid.empty() && ::lstat(job_dir.c_str(), &st) == 0) {
    std::string old = ReadUid(job_dir);
    if (old == uid) return moved;  // This job's own dir (a re-run of its lost part).
    // The uid file is ours, but guard the name against anything odd in it.
    const bool plain =
        !old.empty() && old.size() <= 64 && std::all_of(old.begin(), old.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c));
        });
    if (!plain) old = "old";
    for (int n = 1; n <= 10000 && moved.empty(); ++n) {
      std::string to = absl::StrCat(job_dir, ".", old, ".", n);
      struct stat taken {};
      if (::lstat(to.c_str(), &taken) == 0) continue;
      if (::rename(job_dir.c_str(), to.c_str()) != 0) {
        return ErrnoToStatus(errno, absl::StrCat("rename ", job_dir, " to ", to));
      }
      moved = std::move(to);
    }
    if (moved.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot move ", job_dir, " aside: ", job_dir,
                                                       ".", old, ".1 to .10000 exist"));
    }
    spdlog::info("{} held another job's output (uid {}); moved to {}", job_dir,
                 old == "old" ? "unknown" : old, moved);
  }
  if (::mkdir(job_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", job_dir));
  }
  if (uid.empty()) return moved;
  const std::string path = absl::StrCat(job_dir, "/", kJobUidFile);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", tmp));
  const std::string text = uid + "\n";
  int err = 0;
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    err = errno != 0 ? errno : EIO;
  }
  if (err == 0 && ::fchmod(fd, 0644) != 0) err = errno;  // Past the umask.
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return ErrnoToStatus(err, absl::StrCat("write ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return ErrnoToStatus(err, absl::StrCat("rename ", tmp, " to ", path));
  }
  return moved;
}

std::set<pid_t> ProcessGroupsBelow(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // ppid -> pid
  std::map<pid_t, pid_t> pgrp;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    // After "pid (comm)": state ppid pgrp ...
    std::vector<absl::string_view> f =
        absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
    pid_t ppid = 0;
    pid_t group = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[1], &ppid) || !absl::SimpleAtoi(f[2], &group)) {
      continue;
    }
    children.emplace(ppid, pid);
    pgrp[pid] = group;
  }
  std::set<pid_t> groups;
  if (pgrp.count(root) == 0) return groups;
  std::vector<pid_t> todo = {root};
  std::set<pid_t> seen;
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    if (!seen.insert(p).second) continue;
    if (auto it = pgrp.find(p); it != pgrp.end() && it->second > 1) groups.insert(it->second);
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) todo.push_back(it->second);
  }
  return groups;
}

absl::Status JobRunner::Start(const std::string& job_id, const JobLaunch& launch,
                              const RunAsUser& user, const std::string& uid) {
  if (Has(job_id)) return absl::AlreadyExistsError(absl::StrCat("job ", job_id, " is running"));
  const bool switch_user = ::geteuid() == 0;
  if (!switch_user && ::geteuid() != user.uid) {
    return absl::FailedPreconditionError(absl::StrCat("dgt-agent runs as uid ", ::geteuid(),
                                                      ", not root, and cannot run jobs as ",
                                                      user.name, " (uid ", user.uid, ")"));
  }
  std::error_code ec;
  const std::filesystem::path job_dir(launch.job_dir);
  if (!std::filesystem::exists(job_dir.parent_path(), ec)) {
    std::filesystem::create_directories(job_dir.parent_path(), ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create work_dir ", job_dir.parent_path().string(), ": ", ec.message()));
    }
  }
  if (auto prepared = PrepareJobDir(launch.job_dir, uid); !prepared.ok()) {
    return prepared.status();
  }
  // A code_dir that is not there fails the start here (exit 1, "could not start: ..."), before
  // any dgt-run; one run_as_user may not enter fails in the child (126).
  struct stat cwd_stat {};
  const int cwd_err = ::stat(launch.cwd.c_str(), &cwd_stat) != 0 ? errno
                      : S_ISDIR(cwd_stat.st_mode)                ? 0
                                                                 : ENOTDIR;
  if (cwd_err != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot change to the job's directory ",
                                                      launch.cwd, ": ", std::strerror(cwd_err)));
  }
  if (switch_user && ::chown(launch.job_dir.c_str(), user.uid, user.gid) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chown ", launch.job_dir, " to ", user.name));
  }
  const int log_fd =
      ::open(launch.dgt_run_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", launch.dgt_run_log));
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    ::close(log_fd);
    return ErrnoToStatus(errno, "open /dev/null");
  }

  // Everything the child needs, prepared before fork (only async-signal-safe calls after it).
  std::vector<char*> argv;
  for (const auto& a : launch.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : launch.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string exec_fail = absl::StrCat("dgt-agent: cannot execute ", launch.argv[0]);
  const std::string chdir_fail =
      absl::StrCat("dgt-agent: cannot change to the job's directory ", launch.cwd);
  const std::string user_fail = absl::StrCat("dgt-agent: cannot switch to user ", user.name);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log_fd);
    ::close(null_fd);
    return ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setsid();
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    if (switch_user) {
      if (::setgroups(user.groups.size(), user.groups.data()) != 0 || ::setgid(user.gid) != 0 ||
          ::setuid(user.uid) != 0) {
        ChildFail(user_fail.c_str(), errno, 126);
      }
    }
    // After the user switch: a credential change clears the parent-death signal.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // The daemon died before the prctl.
    if (::chdir(launch.cwd.c_str()) != 0) ChildFail(chdir_fail.c_str(), errno, 126);
    ::execve(argv[0], argv.data(), envp.data());
    ChildFail(exec_fail.c_str(), errno, 127);
  }
  ::close(log_fd);
  ::close(null_fd);
  Job job;
  job.pid = pid;
  job.dgt_run_log = launch.dgt_run_log;
  jobs_.emplace(job_id, std::move(job));
  spdlog::info("job {}: started dgt-run (pid {}) as {} in {}", job_id, pid, user.name, launch.cwd);
  return absl::OkStatus();
}

std::vector<std::string> JobRunner::RunningIds() const {
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  return ids;
}

bool JobRunner::Cancel(const std::string& job_id, absl::Duration grace, absl::Time now) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  Job& job = it->second;
  const absl::Time kill_at = now + std::max(grace, absl::ZeroDuration());
  if (job.cancelled && job.kill_at.has_value() && *job.kill_at <= kill_at) return true;
  job.cancelled = true;
  job.kill_at = kill_at;
  auto groups = ProcessGroupsBelow(job.pid);
  job.groups.insert(groups.begin(), groups.end());
  // Before dgt-run's setsid() its group does not exist yet: signal the process itself.
  if (::kill(-job.pid, SIGTERM) != 0) ::kill(job.pid, SIGTERM);
  spdlog::info("job {}: cancelled; SIGTERM to dgt-run (pid {}), SIGKILL in {}", job_id, job.pid,
               absl::FormatDuration(grace));
  return true;
}

void JobRunner::CancelAll(absl::Duration grace, absl::Time now) {
  for (const auto& id : RunningIds()) Cancel(id, grace, now);
}

void JobRunner::Kill(Job& job) {
  auto groups = ProcessGroupsBelow(job.pid);
  job.groups.insert(groups.begin(), groups.end());
  job.groups.insert(job.pid);
  for (pid_t g : job.groups) ::kill(-g, SIGKILL);
  ::kill(job.pid, SIGKILL);
  job.killed = true;
}

std::vector<JobRunner::Exit> JobRunner::Poll(absl::Time now, bool reap_any) {
  for (auto& [id, job] : jobs_) {
    if (job.kill_at.has_value() && !job.killed && now >= *job.kill_at) {
      spdlog::warn("job {}: still running after the grace period; SIGKILL", id);
      Kill(job);
    }
  }
  std::vector<Exit> out;
  std::vector<pid_t> own;
  if (!reap_any) {
    for (const auto& [id, job] : jobs_) own.push_back(job.pid);
  }
  // With reap_any, up to 4096 children; else each job's dgt-run once.
  const size_t rounds = reap_any ? 4096 : own.size();
  for (size_t i = 0; i < rounds; ++i) {
    int status = 0;
    const pid_t pid = ::waitpid(reap_any ? -1 : own[i], &status, WNOHANG);
    if (pid <= 0) {
      if (reap_any) break;
      continue;
    }
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->second.pid != pid) continue;
      Job& job = it->second;
      // What the workers left behind (dgt-run stops them; this is for a dgt-run that could not).
      if (job.cancelled) {
        for (pid_t g : job.groups) {
          if (g != pid) ::kill(-g, SIGKILL);
        }
      }
      Exit e;
      e.job_id = it->first;
      e.exit_code = ExitCode(status);
      e.message = LastReasonLine(job.dgt_run_log);
      e.cancelled = job.cancelled;
      spdlog::info("job {}: dgt-run (pid {}) exited with {}", e.job_id, pid, e.exit_code);
      out.push_back(std::move(e));
      jobs_.erase(it);
      break;
    }
  }
  return out;
}

std::optional<absl::Time> JobRunner::NextDeadline() const {
  std::optional<absl::Time> next;
  for (const auto& [id, job] : jobs_) {
    if (job.kill_at.has_value() && !job.killed && (!next || *job.kill_at < *next)) {
      next = job.kill_at;
    }
  }
  return next;
}

}  // namespace dgt::daemon
