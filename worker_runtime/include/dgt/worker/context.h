// dgt::worker::Context — what a worker process learns from its launcher: the env contract that
// dgt-run (and torchrun, and Azure ML) sets (docs/ENVIRONMENT.md), parsed and validated.
//
// Thread-safety: an immutable value once built.
#ifndef DGT_WORKER_CONTEXT_H_
#define DGT_WORKER_CONTEXT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace dgt::worker {

struct Context {
  int rank = 0;              // RANK: global rank, 0 <= rank < world_size.
  int local_rank = 0;        // LOCAL_RANK: 0 <= local_rank < local_world_size.
  int world_size = 1;        // WORLD_SIZE.
  int local_world_size = 1;  // LOCAL_WORLD_SIZE (default 1 when unset).
  int node_rank = 0;         // NODE_RANK, else GROUP_RANK (default 0).
  std::string master_addr;   // MASTER_ADDR: the job store's address.
  uint16_t master_port = 0;  // MASTER_PORT: the job store's port.
  std::string run_id;        // TORCHELASTIC_RUN_ID (may be empty).
  int generation = 0;        // TORCHELASTIC_RESTART_COUNT: restarts so far.
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE == "True".

  using Getenv = std::function<const char*(const char*)>;

  // Reads the contract from the process environment (or `getenv`, a seam for tests).
  // Errors: InvalidArgument naming the variable and its value, e.g.
  //   "RANK must be an integer in [0, WORLD_SIZE=4), got '7'"; "MASTER_ADDR is not set".
  static absl::StatusOr<Context> FromEnv(const Getenv& getenv = nullptr);
};

}  // namespace dgt::worker

#endif  // DGT_WORKER_CONTEXT_H_
