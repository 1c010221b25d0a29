// ProcessLauncher: how a WorkerGroup starts, signals and reaps worker processes — the seam that
// lets unit tests drive the group with a fake (tests/agent/fake_process_launcher.h).
// ForkExecLauncher is the real one: fork/exec, each worker the leader of a new session and
// process group (as torchrun 2.x), PR_SET_PDEATHSIG, a pidfd as the exit event.
//
// Thread-compatible.
#ifndef DGT_AGENT_WORKERS_PROCESS_LAUNCHER_H_
#define DGT_AGENT_WORKERS_PROCESS_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dgt::agent {

struct LaunchRequest {
  std::vector<std::string> argv;  // argv[0] is resolved against PATH.
  std::vector<std::string> env;   // "KEY=VALUE".
  int local_rank = 0;             // For error messages.
  // A warm standby (--standby-workers): the child also gets one end of a Unix stream socketpair
  // as descriptor kStandbyChannelFd (the only descriptor above stderr it inherits); the other end
  // comes back as LaunchedProcess::channel_fd. docs/RECOVERY.md, "Warm standbys".
  bool standby_channel = false;
};

// The descriptor number of a standby's channel in the child (DGT_STANDBY_FD names it too).
inline constexpr int kStandbyChannelFd = 3;

// Descriptors of a started process, owned by the caller (close them).
struct LaunchedProcess {
  pid_t pid = 0;       // Also its process group id.
  int exit_fd = -1;    // Becomes readable once the process exited (a pidfd).
  int stdout_fd = -1;  // Read ends of its stdout and stderr.
  int stderr_fd = -1;
  int channel_fd = -1;  // The agent's end of the standby channel; -1 unless requested.
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts a process. Errors: NotFound for a missing executable; Internal for fork/pipe.
  virtual absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest& request) = 0;
  // Sends `sig` to the process group `pgid` (ignores errors: the group may be gone).
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // Collects the exit of `pid` once its exit_fd was readable (or after SIGKILL); returns the
  // waitpid status.
  virtual int Reap(pid_t pid) = 0;
};

class ForkExecLauncher final : public ProcessLauncher {
 public:
  absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest& request) override;
  void SignalGroup(pid_t pgid, int sig) override;
  int Reap(pid_t pid) override;
};

// A process-wide ForkExecLauncher.
ProcessLauncher* DefaultProcessLauncher();

// Whether `exit_fd` (LaunchedProcess::exit_fd) reads as ready now: its process exited (poll, no
// wait). An exit watcher checks it before it reaps: Asio may complete a wait with the readiness
// of a descriptor closed in the same event batch whose fd number and state this one reuses, and
// waitpid on a live process would block the agent's loop. False: wait again.
bool ExitFdReady(int exit_fd);

// For a child between fork and exec (async-signal-safe): every signal that has a handler (the
// parent's, e.g. Asio's, which writes into the parent's signal pipe) gets SIG_DFL back, and
// SIGPIPE, which the agent ignores, too. Ignored signals stay ignored (nohup). Call it while every
// signal is still blocked (the parent blocks them around fork), then unblock: a signal sent to
// the child in that window then takes its default action instead of posing as one the agent
// received.
void ResetSignalHandlersInChild();

// fork(2) with every signal blocked across it: the parent gets its mask back, the child keeps all
// blocked (to call ResetSignalHandlersInChild, then unblock). Returns fork's result; on -1, errno.
pid_t ForkWithSignalsBlocked();

// Finds `program` in PATH (or checks it, when it contains a '/'). Errors: NotFound.
absl::StatusOr<std::string> ResolveExecutable(const std::string& program);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_PROCESS_LAUNCHER_H_
