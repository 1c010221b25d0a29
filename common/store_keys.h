// Every key dgt itself writes into a job's store (the c10d TCPStore that node rank 0 serves),
// in one place. The keys are wire-visible: trainers (tests/e2e/workers/flaky.py), peers of an
// older version and operators (`dgt store get`) read them, so a change here is a protocol change;
// tests/common/store_keys_test.cc pins every shape.
//
// Shapes (<n>: node rank, <r>: global rank, <g>: generation, all ASCII decimal; <run_id> as
// --rdzv-id; <group> a trainer's process-group name, "world" by default):
//   Static backend (agent/static_coordinator.h), one run's agents coordinating without a service:
//     dgt/static/<run_id>/failed            "<exit status> <message>", the first failure
//     dgt/static/<run_id>/joined/<n>        "1" once node <n> reached the store
//     dgt/static/<run_id>/done/<n>          "<exit status>" once node <n>'s workers ended
//     dgt/static/<run_id>/alive/<n>         liveness: a counter node <n> > 0 bumps each heartbeat
//   Done marks (agent/done_marks.h), a round's outcome when the rendezvous service is gone:
//     dgt/done/<round>/<n>                  "<exit status>" of node <n>'s workers ("0": succeeded)
//     dgt/done/<round>/seen/<n>             "1" once node <n> learned the outcome from the marks
//   TensorFlow cluster (agent/tf_cluster.h), each node's worker addresses for TF_CONFIG:
//     dgt/tf/<round>/<n>                    JSON array of node <n>'s "host:port" by local rank
//     dgt/tf/<round>/<n>/roles              JSON object of node <n>'s role flags (set first)
//   Rank restarts (--restart-policy rank; docs/ENVIRONMENT.md):
//     dgt/restart/<r>                       the new generation of rank <r>; on the wire
//                                           "/dgt/restart/<r>", as torch clients put '/' first
//   In-place recovery (dgt/worker/recovery_keys.h, docs/RECOVERY.md); the agent publishes a
//   failure twice: these keys, and the same behind '/' for torch clients (python/dgt/keys.py):
//     dgt/recovery/<group>/generation       current generation (missing = 0)
//     dgt/recovery/<group>/g<g>/open        set once generation <g> is opened (value: why)
//     dgt/recovery/<group>/g<g>/failed      ranks reported failed when <g> opened, "<r>," each
//     dgt/recovery/<group>/g<g>/alive/<r>   rank <r> joining generation <g>
//     dgt/recovery/<group>/member/<r>       the last generation rank <r> joined
//   Communicators (dgt/worker/communicator.h):
//     dgt/comm/<group>/g<g>                 prefix of one generation's bootstrap keys (Gloo's
//                                           own, and NCCL's nccl_id/<i> below it)
//
// Every key is built by a function below and nowhere else (C++); the Python package mirrors the
// ones its trainers read in python/dgt/keys.py (recovery, communicator prefix) and
// tests/e2e/workers/flaky.py (dgt/restart/<r>), pinned against these by
// tests/common/store_keys_test.cc's shapes.
//
// Pure functions; thread-safe.
#ifndef DGT_COMMON_STORE_KEYS_H_
#define DGT_COMMON_STORE_KEYS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dgt::keys {

// Static backend.
std::string StaticFailedKey(absl::string_view run_id);
std::string StaticJoinedKey(absl::string_view run_id, int node_rank);
std::string StaticDoneKey(absl::string_view run_id, int node_rank);
std::string StaticAliveKey(absl::string_view run_id, int node_rank);

// Done marks.
std::string DoneMarkKey(int64_t round, int node_rank);
std::string DoneSeenKey(int64_t round, int node_rank);

// TensorFlow cluster (round 0 for the static backend).
std::string TfAddressesKey(int64_t round, int node_rank);
std::string TfRolesKey(int64_t round, int node_rank);

// Rank restarts: the key as a trainer names it (store.get(RestartKey(r))), and as it travels in
// a torch 1.x SET frame (RestartWireKey(r) == "/" + RestartKey(r)).
std::string RestartKey(int rank);
std::string RestartWireKey(int rank);

// In-place recovery.
std::string RecoveryGenerationKey(absl::string_view group);
std::string RecoveryOpenKey(absl::string_view group, int generation);
std::string RecoveryFailedKey(absl::string_view group, int generation);
std::string RecoveryAliveKey(absl::string_view group, int generation, int rank);
std::string RecoveryMemberKey(absl::string_view group, int rank);

// Communicator bootstrap prefix of one generation (no trailing '/').
std::string CommPrefix(absl::string_view group, int generation);

}  // namespace dgt::keys

#endif  // DGT_COMMON_STORE_KEYS_H_
