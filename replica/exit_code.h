// The exit statuses dgt's binaries share (docs/EXIT_CODES.md; dgt-run's meanings below), chosen
// so that a scheduler can tell "the job's code failed" from "the launcher could not place this
// node" by code alone (Kubernetes podFailurePolicy onExitCodes, Slurm requeue on exit code), and
// the one mapping from a call's status to them.
// The launcher's codes follow BSD sysexits.h where one fits.
//
// Thread-safe (constants and a pure function).
#ifndef DGT_REPLICA_EXIT_CODE_H_
#define DGT_REPLICA_EXIT_CODE_H_

#include "absl/status/status.h"

namespace dgt::replica {

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

// The exit status for a call's final status (absl and gRPC codes agree):
//   OK                                          -> kExitSuccess (0)
//   UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED   -> kExitRendezvousUnavailable (69)
//   UNAUTHENTICATED, PERMISSION_DENIED          -> kExitNotAdmitted (77)
//   INVALID_ARGUMENT                            -> kExitUsage (2)
//   any other                                   -> kExitLauncherError (1)
int ExitCodeFor(absl::StatusCode code);
inline int ExitCodeFor(const absl::Status& status) { return ExitCodeFor(status.code()); }

}  // namespace dgt::replica

#endif  // DGT_REPLICA_EXIT_CODE_H_
