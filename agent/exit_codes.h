// Exit statuses of dgt-run (and the agent), chosen so that a scheduler can tell "the job's code
// failed" from "the launcher could not place this node" and decide by code alone (Kubernetes
// podFailurePolicy onExitCodes, Slurm requeue on exit code). docs/EXIT_CODES.md lists them.
//
// A worker's own code passes through unchanged (0-255), 128 + N when signal N ended it, so a
// worker that itself exits with one of the codes below is indistinguishable by code alone; the
// agent's last stderr line always says which it was.
#ifndef DGT_AGENT_EXIT_CODES_H_
#define DGT_AGENT_EXIT_CODES_H_

#include "replica/exit_code.h"

namespace dgt::agent {

// The launcher's codes are the ones every dgt binary shares (replica/exit_code.h).
using replica::kExitJoinTimeout;
using replica::kExitLauncherError;
using replica::kExitNotAdmitted;
using replica::kExitRendezvousUnavailable;
using replica::kExitSuccess;
using replica::kExitUsage;

// dgt-run's own: a node health check failed (docs/RECOVERY.md "Node health checks"), before the
// join (the node did not join) or while the run ran (the node left it). Retrying on this node
// will not help until it is repaired; on another node it may (sysexits EX_OSERR).
inline constexpr int kExitNodeUnhealthy = 71;

}  // namespace dgt::agent

#endif  // DGT_AGENT_EXIT_CODES_H_
