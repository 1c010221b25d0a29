// Exit statuses of dgt-run (and the agent), chosen so that a scheduler can tell "the job's code
// failed" from "the launcher could not place this node" and decide by code alone (Kubernetes
// podFailurePolicy onExitCodes, Slurm requeue on exit code). docs/EXIT_CODES.md lists them.
//
// A worker's own code passes through unchanged (0-255), 128 + N when signal N ended it, so a
// worker that itself exits with one of the codes below is indistinguishable by code alone; the
// agent's last stderr line always says which it was. The launcher's codes follow BSD sysexits.h
// where one fits, as systemd and many schedulers already know them.
#ifndef DGT_AGENT_EXIT_CODES_H_
#define DGT_AGENT_EXIT_CODES_H_

namespace dgt::agent {

// Every worker of the run succeeded.
inline constexpr int kExitSuccess = 0;
// Something else failed in the launcher itself (an internal error, a worker that could not be
// started, a run that failed on another node without a worker code to pass on).
inline constexpr int kExitLauncherError = 1;
// Bad command line: an unknown flag, a value out of range, conflicting aliases (as argparse).
inline constexpr int kExitUsage = 2;
// The rendezvous service (or, with the static backend, node rank 0's store) could not be reached
// within --rdzv-connect-timeout, or was lost and did not come back in time (sysexits
// EX_UNAVAILABLE). Retrying the node later may succeed.
inline constexpr int kExitRendezvousUnavailable = 69;
// Not enough nodes joined within --join-timeout (sysexits EX_TEMPFAIL). Retrying may succeed.
inline constexpr int kExitJoinTimeout = 75;
// This node was not admitted to the run: the run is closed or already running at its maximum
// size, the service refused the join, or another agent with the same --node-id replaced this
// one (sysexits EX_NOPERM). Retrying the same command will not help.
inline constexpr int kExitNotAdmitted = 77;

}  // namespace dgt::agent

#endif  // DGT_AGENT_EXIT_CODES_H_
