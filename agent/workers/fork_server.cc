#include "agent/workers/fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/workers/worker_group_internal.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"

namespace dgt::agent {

namespace asio = boost::asio;

namespace {

constexpr size_t kStderrTail = 10;
constexpr size_t kMaxChannelLine = 4096;  // The server's lines are short.

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

size_t PythonPrefixLength(const std::vector<std::string>& argv) {
  if (!LooksLikePython(argv)) return 0;
  size_t i = 1;
  while (i < argv.size()) {
    const std::string& a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a == "--" || a == "-m" || a == "-c") break;
    if (a[1] == '-') {  // A long option; one takes a value.
      i += a == "--check-hash-based-pycs" ? 2 : 1;
      continue;
    }
    // A cluster of short options ("-u", "-uB", "-Wignore", "-X dev"): -m and -c inside one
    // hide where the command starts.
    const size_t value_at = a.find_first_of("WX", 1);
    const absl::string_view flags = absl::string_view(a).substr(1, value_at - 1);
    if (absl::StrContains(flags, 'm') || absl::StrContains(flags, 'c')) return 0;
    i += value_at == a.size() - 1 ? 2 : 1;  // "-W" "ignore": the value is the next entry.
  }
  return std::min(i, argv.size());
}

std::vector<std::string> EnvWithoutRank(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const std::string& kv : env) {
    const absl::string_view key = absl::string_view(kv).substr(0, kv.find('='));
    bool dropped = key == "DGT_STANDBY" || key == "DGT_STANDBY_FD" || key == "DGT_FORKSERVER_FD";
    for (const char* name : kStandbyDroppedEnv) dropped |= key == name;
    if (!dropped) out.push_back(kv);
  }
  return out;
}

ForkServer::ForkServer(asio::io_context& io, Options options, ChildExit on_child_exit,
                       GroupCallback on_spawn, GroupCallback on_reaped)
    : io_(io),
      options_(options),
      on_child_exit_(std::move(on_child_exit)),
      on_spawn_(std::move(on_spawn)),
      on_reaped_(std::move(on_reaped)),
      pidfd_(io),
      channel_(io),
      output_{asio::posix::stream_descriptor(io), asio::posix::stream_descriptor(io)} {
  if (options_.launcher == nullptr) options_.launcher = DefaultProcessLauncher();
  gone_ = true;  // Until Start.
}

ForkServer::~ForkServer() {
  if (pid_ != 0 && !exited_) {
    options_.launcher->SignalGroup(pid_, SIGKILL);
    options_.launcher->Reap(pid_);
    if (on_reaped_) on_reaped_(pid_);
  }
}

absl::Status ForkServer::Start(const WorkerSpec& worker) {
  const size_t prefix = PythonPrefixLength(worker.argv);
  if (prefix == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the command '", worker.argv.empty() ? "" : worker.argv[0],
                     "' is not a Python interpreter whose script can be told from its options"));
  }
  prefix_argv_.assign(worker.argv.begin(), worker.argv.begin() + static_cast<ptrdiff_t>(prefix));
  LaunchRequest request;
  request.argv = prefix_argv_;
  request.argv.emplace_back("-m");
  request.argv.emplace_back("dgt.forkserver");
  request.env = EnvWithoutRank(worker.env);
  request.env.push_back(absl::StrCat("DGT_FORKSERVER_FD=", kStandbyChannelFd));
  request.local_rank = -1;
  request.standby_channel = true;
  options_.stdout_console = worker.stdout_console;
  options_.stderr_console = worker.stderr_console;
  absl::StatusOr<LaunchedProcess> launched = options_.launcher->Launch(request);
  if (!launched.ok()) return launched.status();
  pid_ = launched->pid;
  gone_ = false;
  if (on_spawn_) on_spawn_(pid_);
  pidfd_.assign(launched->exit_fd);
  channel_.assign(launched->channel_fd);
  output_[0].assign(launched->stdout_fd);
  output_[1].assign(launched->stderr_fd);
  pipes_open_ = 2;
  spdlog::debug("dgt-run: started the fork server, pid {}", pid_);
  WatchExit();
  PumpOutput(false);
  PumpOutput(true);
  ReadChannel();
  return absl::OkStatus();
}

void ForkServer::WatchExit() {
  pidfd_.async_wait(asio::posix::stream_descriptor::wait_read,
                    [this, life = std::weak_ptr<int>(life_)](boost::system::error_code ec) {
                      if (ec || life.expired()) return;
                      if (!ExitFdReady(pidfd_.native_handle())) {
                        WatchExit();  // A stale readiness: the server runs.
                        return;
                      }
                      OnExit();
                    });
}

void ForkServer::ReadChannel() {
  channel_.async_read_some(asio::buffer(channel_buf_), [this, life = std::weak_ptr<int>(life_)](
                                                           boost::system::error_code ec, size_t n) {
    if (life.expired() || ec == asio::error::operation_aborted) return;
    if (ec) {
      ChannelGone();
      return;
    }
    channel_data_.append(channel_buf_.data(), n);
    ConsumeLines();
    if (!gone_) ReadChannel();
  });
}

void ForkServer::ConsumeLines() {
  size_t start = 0;
  for (size_t nl; (nl = channel_data_.find('\n', start)) != std::string::npos; start = nl + 1) {
    OnLine(channel_data_.substr(start, nl - start));
  }
  channel_data_.erase(0, start);
  if (channel_data_.size() > kMaxChannelLine) {
    spdlog::warn("dgt-run: the fork server wrote {} bytes without a newline; killing it",
                 channel_data_.size());
    channel_data_.clear();
    Kill();
  }
}

void ForkServer::OnLine(const std::string& line) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
  int64_t a = 0;
  int64_t b = 0;
  if (line == "ready" && !ready_) {
    ready_ = true;
    spdlog::info("dgt-run: fork server pid {} is ready", pid_);
  } else if (words.size() == 2 && words[0] == "pid" && absl::SimpleAtoi(words[1], &a) && a > 0) {
    replied_ = true;
    reply_pid_ = static_cast<pid_t>(a);
    children_.insert(reply_pid_);
  } else if (absl::StartsWith(line, "error ")) {
    replied_ = true;
    reply_error_ = line.substr(6);
  } else if (words.size() == 3 && words[0] == "exit" && absl::SimpleAtoi(words[1], &a) &&
             absl::SimpleAtoi(words[2], &b) && children_.erase(static_cast<pid_t>(a)) > 0) {
    // Posted: Fork() may be reading the channel inside a caller that is not ready for an exit.
    asio::post(io_, [this, life = std::weak_ptr<int>(life_), pid = static_cast<pid_t>(a),
                     status = static_cast<int>(b)] {
      if (!life.expired() && on_child_exit_) on_child_exit_(pid, status);
    });
  } else {
    spdlog::warn("dgt-run: the fork server wrote '{}' on its channel; ignored",
                 absl::CEscape(line));
  }
}

void ForkServer::ChannelGone() {
  if (gone_) return;
  gone_ = true;
  boost::system::error_code ignored;
  channel_.close(ignored);
  // Its children die with it (PR_SET_PDEATHSIG): SIGKILL is their status when none came.
  for (pid_t child : children_) {
    asio::post(io_, [this, life = std::weak_ptr<int>(life_), child] {
      if (!life.expired() && on_child_exit_) on_child_exit_(child, SIGKILL);
    });
  }
  children_.clear();
}

void ForkServer::Kill() {
  killed_ = true;
  if (pid_ != 0 && !exited_) options_.launcher->SignalGroup(pid_, SIGKILL);
  ChannelGone();
}

void ForkServer::OnExit() {
  exit_status_ = options_.launcher->Reap(pid_);
  exited_ = true;
  options_.launcher->SignalGroup(pid_, SIGKILL);  // Its leftovers.
  if (on_reaped_) on_reaped_(pid_);
  boost::system::error_code ignored;
  pidfd_.close(ignored);
  const bool was_ready = ready_;
  ChannelGone();
  if (killed_) return;  // Killed here: no news.
  if (was_ready) {
    spdlog::warn("dgt-run: fork server pid {} {}; replacements start as fresh processes", pid_,
                 WIFSIGNALED(exit_status_)
                     ? absl::StrCat("was killed by signal ", WTERMSIG(exit_status_))
                     : absl::StrCat("exited with code ", WEXITSTATUS(exit_status_)));
    return;
  }
  MaybeWarnExit();  // Once its stderr reached EOF: the warning quotes it.
}

void ForkServer::MaybeWarnExit() {
  if (!exited_ || ready_ || pipes_open_ > 0) return;
  std::string tail;
  for (const std::string& line : stderr_tail_) absl::StrAppend(&tail, "\n  ", line);
  spdlog::warn(
      "dgt-run: fork server pid {} {} before it reported ready; replacements start as fresh "
      "processes this round (it runs `python -m dgt.forkserver`: the dgt package must be "
      "importable, docs/RECOVERY.md \"Fork server\"){}",
      pid_,
      WIFSIGNALED(exit_status_) ? absl::StrCat("was killed by signal ", WTERMSIG(exit_status_))
                                : absl::StrCat("exited with code ", WEXITSTATUS(exit_status_)),
      tail.empty() ? std::string(" (it wrote nothing on stderr)")
                   : absl::StrCat("; its last stderr lines:", tail));
}

void ForkServer::PumpOutput(bool is_stderr) {
  const int i = is_stderr ? 1 : 0;
  output_[i].async_read_some(
      asio::buffer(output_buf_[i]),
      [this, i, life = std::weak_ptr<int>(life_)](boost::system::error_code ec, size_t n) {
        if (life.expired()) return;
        const bool console = i == 1 ? options_.stderr_console : options_.stdout_console;
        const int fd = i == 1 ? options_.console_err : options_.console_out;
        std::string& partial = output_partial_[i];
        if (!ec) partial.append(output_buf_[i].data(), n);
        std::string text;
        size_t start = 0;
        for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
          const std::string line = partial.substr(start, nl - start);
          absl::StrAppend(&text, "[forkserver]: ", line, "\n");
          if (i == 1) {
            stderr_tail_.push_back(line);
            if (stderr_tail_.size() > kStderrTail) stderr_tail_.pop_front();
          }
        }
        partial.erase(0, start);
        if (ec || partial.size() > 65536) {  // EOF, or an endless line: what is left goes out.
          if (!partial.empty()) {
            absl::StrAppend(&text, "[forkserver]: ", partial, "\n");
            if (i == 1) stderr_tail_.push_back(partial);
            partial.clear();
          }
        }
        if (console && !text.empty()) WriteAll(fd, text);
        if (ec) {
          boost::system::error_code ignored;
          output_[i].close(ignored);
          --pipes_open_;
          MaybeWarnExit();
          return;
        }
        PumpOutput(i == 1);
      });
}

absl::StatusOr<ForkServer::Forked> ForkServer::Fork(const WorkerSpec& spec) {
  if (!ready()) return absl::FailedPreconditionError("the fork server is not ready");
  if (spec.argv.size() <= prefix_argv_.size() ||
      !std::equal(prefix_argv_.begin(), prefix_argv_.end(), spec.argv.begin())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", spec.rank, "'s interpreter and options differ from the fork server's"));
  }
  nlohmann::json message = nlohmann::json::object();
  AddEnvToMessage(spec.env, &message);
  message["argv"] = std::vector<std::string>(
      spec.argv.begin() + static_cast<ptrdiff_t>(prefix_argv_.size()), spec.argv.end());
  const std::string text =
      message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return ErrnoToStatus(e, "pipe2");
  }
  auto close_all = [&] {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  const int sock = channel_.native_handle();
  const absl::Time deadline = absl::Now() + options_.reply_timeout;
  // Waits until `sock` has `events`, at most until the deadline.
  auto wait_for = [&](short events) {
    for (;;) {
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0) return false;
      pollfd p = {sock, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  };
  // The descriptors ride on the first bytes; the rest follows as the server reads.
  size_t off = 0;
  bool fds_sent = false;
  while (off < text.size()) {
    iovec iov = {const_cast<char*>(text.data() + off), text.size() - off};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    if (!fds_sent) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(2 * sizeof(int));
      const int fds[2] = {out_pipe[1], err_pipe[1]};
      std::memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT)) continue;
    if (n <= 0) {
      close_all();
      spdlog::warn("dgt-run: cannot send rank {}'s request to the fork server; killing it",
                   spec.rank);
      Kill();
      return absl::UnavailableError("the fork server's channel broke");
    }
    fds_sent = true;
    off += static_cast<size_t>(n);
  }
  // The server has its own copies of the write ends.
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_pipe[1] = err_pipe[1] = -1;
  replied_ = false;
  reply_error_.clear();
  while (!replied_ && !gone_) {
    char buf[4096];
    const ssize_t n = ::recv(sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      channel_data_.append(buf, static_cast<size_t>(n));
      ConsumeLines();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLIN)) continue;
    // EOF, an error, or no answer in time.
    spdlog::warn("dgt-run: the fork server {} rank {}'s request; killing it",
                 n == 0 ? "closed its channel on" : "did not answer", spec.rank);
    Kill();
  }
  if (!replied_) {
    close_all();
    return absl::UnavailableError("the fork server did not answer");
  }
  if (!reply_error_.empty()) {
    close_all();
    return absl::InvalidArgumentError(
        absl::StrCat("the fork server refused rank ", spec.rank, "'s request: ", reply_error_));
  }
  Forked forked;
  forked.pid = reply_pid_;
  forked.stdout_fd = out_pipe[0];
  forked.stderr_fd = err_pipe[0];
  forked.exit_fd = static_cast<int>(::syscall(SYS_pidfd_open, forked.pid, 0));
  if (forked.exit_fd < 0 && errno != ESRCH) {
    const int e = errno;
    ::kill(forked.pid, SIGKILL);  // Not watched: it must not run on as an unseen rank.
    close_all();
    return ErrnoToStatus(e, "pidfd_open");
  }
  // ESRCH: it ended and the server reaped it already; its "exit" line tells how.
  return forked;
}

}  // namespace dgt::agent
