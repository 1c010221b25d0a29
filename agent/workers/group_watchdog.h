// GroupWatchdog: makes sure no worker process group outlives the agent, `kill -9` of the agent
// included. PR_SET_PDEATHSIG only reaches a worker itself, not the processes it started, so at
// start the agent forks a tiny watchdog process (its own process group, ignoring the signals a
// terminal or scheduler sends) that holds the read end of a pipe. The agent registers each
// worker's process group id through the pipe; when the pipe closes, because the agent exited or
// was killed, the watchdog sends SIGKILL to every registered group, removes the directory it was
// given (if any) and exits.
//
// Thread-compatible. Start() must run before the agent starts threads (the child only makes
// async-signal-safe calls, but it must not inherit locks held by other threads).
#ifndef DGT_AGENT_WORKERS_GROUP_WATCHDOG_H_
#define DGT_AGENT_WORKERS_GROUP_WATCHDOG_H_

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dgt::agent {

class GroupWatchdog {
 public:
  GroupWatchdog() = default;
  // Closes the pipe (the watchdog kills what is still registered) and reaps the watchdog.
  ~GroupWatchdog();
  GroupWatchdog(const GroupWatchdog&) = delete;
  GroupWatchdog& operator=(const GroupWatchdog&) = delete;

  // Forks the watchdog. Errors: Internal when pipe or fork fail.
  absl::Status Start();

  // Adds / removes a process group id. No-ops before Start.
  void Register(pid_t pgid);
  void Unregister(pid_t pgid);

  // After the agent is gone (pipe EOF) and the groups are killed, the watchdog removes `dir`
  // (recursively; the agent's temporary log directory, which a killed agent cannot remove).
  // The last call wins. Errors: InvalidArgument for a relative path or one over 4,000 bytes;
  // the errno of a failed pipe write. A no-op before Start.
  absl::Status RemoveOnExit(absl::string_view dir);

  // Undoes RemoveOnExit: the watchdog removes no directory (the agent keeps its temporary log
  // directory, e.g. for an error file its failure summary names). Errors: the errno of a failed
  // pipe write. A no-op before Start.
  absl::Status KeepOnExit();

  pid_t pid() const { return pid_; }

 private:
  // Sends the directory record (RemoveOnExit; "" for KeepOnExit).
  absl::Status SendCleanupDir(absl::string_view dir);

  int fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_GROUP_WATCHDOG_H_
