// ForkServer: one pre-imported Python process per node that forks a failed rank's replacement
// (`dgt-run --fork-server on`, python/dgt/forkserver.py, docs/RECOVERY.md "Fork server"). It
// runs as `<the workers' interpreter and its options> -m dgt.forkserver`, with the workers'
// environment minus the rank's variables (kStandbyDroppedEnv) plus DGT_FORKSERVER_FD=3, one end
// of a Unix socketpair. On the channel it writes "ready\n" once torch is imported; for each
// request (one JSON line, {"env": {...}, "argv": [...]}, with the rank's stdout and stderr pipes
// passed by SCM_RIGHTS) it answers "pid N\n" (or "error MESSAGE\n"), and later "exit N STATUS\n"
// when that child ended (STATUS as waitpid gives it). A forked child leads its own process
// group and dies with the server, which dies with the agent (PR_SET_PDEATHSIG).
//
// The server's own output reaches the console prefixed "[forkserver]: ". A server that exits
// before it reported ready (no module dgt, no torch) is not started again (one per round's
// group), with a warning quoting its last stderr lines; nor is one that exits later (its children
// die with it: their status is SIGKILL).
//
// Thread-compatible: use from the io_context's thread only.
#ifndef DGT_AGENT_WORKERS_FORK_SERVER_H_
#define DGT_AGENT_WORKERS_FORK_SERVER_H_

#include <sys/types.h>

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/workers/process_launcher.h"
#include "agent/workers/worker_group.h"
#include "boost/asio.hpp"

namespace dgt::agent {

class ForkServer {
 public:
  struct Options {
    ProcessLauncher* launcher = nullptr;  // Starts, signals and reaps the server; not owned.
    int console_out = 1;                  // Where its output goes, prefixed "[forkserver]: ".
    int console_err = 2;
    bool stdout_console = true;
    bool stderr_console = true;
    // How long Fork() waits for the server's answer; past it the server is killed.
    absl::Duration reply_timeout = absl::Seconds(5);
  };
  // A forked child's end, from its "exit N STATUS" line; or SIGKILL (as waitpid encodes it) for
  // children still running when the server is gone. Always called from a posted handler.
  using ChildExit = std::function<void(pid_t pid, int status)>;
  // The server's process group, when it starts and once it was reaped (the GroupWatchdog).
  using GroupCallback = std::function<void(pid_t)>;

  ForkServer(boost::asio::io_context& io, Options options, ChildExit on_child_exit,
             GroupCallback on_spawn, GroupCallback on_reaped);
  // SIGKILL to the server's process group (its children die with it); reaps it.
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  // Starts the server for workers like `worker`.
  // Errors: FailedPrecondition when `worker.argv[0]` is not a Python interpreter or its options
  // hide where the script starts (-mMODULE, -cCODE clusters); as ProcessLauncher::Launch.
  absl::Status Start(const WorkerSpec& worker);

  bool ready() const { return ready_ && !gone_; }
  // Off: never started, not ready in time, or exited.
  bool gone() const { return gone_; }
  pid_t pid() const { return pid_; }

  struct Forked {
    pid_t pid = 0;
    int exit_fd = -1;  // A pidfd; -1 when the child had already ended and was reaped.
    int stdout_fd = -1;
    int stderr_fd = -1;
  };
  // Forks `spec` (its argv must start with the server's interpreter and options). Waits for the
  // answer, at most Options::reply_timeout. The caller owns the descriptors.
  // Errors: FailedPrecondition when not ready or `spec.argv` has another interpreter or options;
  // InvalidArgument for the server's "error" answer; Unavailable when the channel broke or the
  // answer did not come in time (the server is then killed); Internal for pipe2.
  absl::StatusOr<Forked> Fork(const WorkerSpec& spec);

  // SIGKILL to the server's group. Idempotent.
  void Kill();

 private:
  void ReadChannel();
  // Handles complete lines in channel_data_; true when one was Fork()'s answer.
  void ConsumeLines();
  void OnLine(const std::string& line);
  void PumpOutput(bool is_stderr);
  // Waits for the server's exit (OnExit), again after a stale readiness (ExitFdReady).
  void WatchExit();
  void OnExit();
  void ChannelGone();
  void MaybeWarnExit();

  boost::asio::io_context& io_;
  Options options_;
  ChildExit on_child_exit_;
  GroupCallback on_spawn_;
  GroupCallback on_reaped_;
  std::vector<std::string> prefix_argv_;  // Interpreter and options, shared with the workers.
  pid_t pid_ = 0;
  bool ready_ = false;
  bool gone_ = false;
  bool exited_ = false;
  bool killed_ = false;  // By Kill(): its exit is expected.
  int exit_status_ = 0;
  int pipes_open_ = 0;
  boost::asio::posix::stream_descriptor pidfd_;
  boost::asio::posix::stream_descriptor channel_;
  std::array<boost::asio::posix::stream_descriptor, 2> output_;
  std::array<std::array<char, 4096>, 2> output_buf_;
  std::array<std::string, 2> output_partial_;
  std::deque<std::string> stderr_tail_;
  std::array<char, 4096> channel_buf_;
  std::string channel_data_;
  // Fork()'s answer: the pid, or the error text.
  pid_t reply_pid_ = 0;
  std::string reply_error_;
  bool replied_ = false;
  std::set<pid_t> children_;  // Forked and not reported ended.
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

// How many leading entries of a Python command line are the interpreter and its options (the
// rest: the script and its arguments, "-m module ...", "-c code ..." or "-- script ...").
// Returns 0 when argv[0] is not a Python interpreter ("python[0-9.]*") or its options cannot be
// told from the command (a cluster such as -um or -cCODE).
size_t PythonPrefixLength(const std::vector<std::string>& argv);

// A worker's environment without the rank's variables (kStandbyDroppedEnv) and dgt's channel
// variables (DGT_STANDBY, DGT_STANDBY_FD, DGT_FORKSERVER_FD): a standby's or the fork server's.
std::vector<std::string> EnvWithoutRank(const std::vector<std::string>& env);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_FORK_SERVER_H_
