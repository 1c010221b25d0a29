// CommandCheck: a user's health check (--health-check CMD): `/bin/sh -c CMD` in a process group
// of its own, stdin from /dev/null, stdout and stderr into one pipe of which only the last
// kHealthOutputCap bytes are kept (health_policy.h OutputTail), so a check that prints megabytes
// costs no memory and no log lines. Killed (its whole group, SIGKILL) at min(timeout, deadline);
// what its end means is CommandVerdict's.
//
// Thread-compatible; Run blocks its caller (the health runner's thread) up to the deadline.
#ifndef DGT_AGENT_HEALTH_COMMAND_CHECK_H_
#define DGT_AGENT_HEALTH_COMMAND_CHECK_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "agent/health/health_check.h"
#include "agent/health/health_policy.h"

namespace dgt::agent {

// Runs `command` once, to its end or until `deadline`; with `cancel` set (read every 50 ms at
// most) it is killed as at its deadline. Errors are results: a command that cannot be started
// ends with code 127 and the errno text as output.
// `track` (may be empty) is called with the command's process group id and true once it started,
// and false once it was killed and reaped: the agent's watchdog kills a group still registered
// when the agent dies (kill -9, or a signal before it handles signals).
using GroupTracker = std::function<void(pid_t pgid, bool running)>;
CommandEnd RunHealthCommand(const std::string& command, absl::Time deadline,
                            const std::atomic<bool>* cancel = nullptr,
                            const GroupTracker& track = {});

// The check's name is the command as given. `timeout`: the longest one run may take
// (--health-check-timeout). `cancel` (not owned, may be null) ends a run early: the agent is
// stopping.
std::unique_ptr<HealthCheck> CommandCheck(std::string command, absl::Duration timeout,
                                          const std::atomic<bool>* cancel = nullptr,
                                          GroupTracker track = {});

}  // namespace dgt::agent

#endif  // DGT_AGENT_HEALTH_COMMAND_CHECK_H_
