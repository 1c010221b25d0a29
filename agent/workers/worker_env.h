// The environment contract every worker starts with (REFERENCE.md §1, docs/ENVIRONMENT.md):
// RANK, LOCAL_RANK, WORLD_SIZE, ... set on top of the agent's own environment.
#ifndef DGT_AGENT_WORKERS_WORKER_ENV_H_
#define DGT_AGENT_WORKERS_WORKER_ENV_H_

#include <map>
#include <string>
#include <vector>

#include "agent/flags/launch_options.h"

namespace dgt::agent {

// What the rendezvous assigned to this node for one round.
struct NodeAssignment {
  std::string run_id;
  int node_rank = 0;
  int node_count = 1;
  int world_size = 1;
  int first_global_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
};

using EnvMap = std::map<std::string, std::string>;

// Per-worker additions to the contract that depend on the launch, not on the round.
struct WorkerEnvExtras {
  std::string role = "default";  // ROLE_NAME (one role per job: ROLE_RANK = RANK).
  Distribution distribution = Distribution::kPytorch;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE; not set when empty.
  std::string tf_config;   // TF_CONFIG (tensorflow only), see BuildTfConfig.
  // --virtual-local-rank (torchrun 2.13 LocalElasticAgent): LOCAL_RANK=0, and
  // CUDA_VISIBLE_DEVICES = entry `local_rank` of the base environment's CUDA_VISIBLE_DEVICES
  // (whitespace stripped), or `local_rank` itself when the base has none. Other variables
  // (OMPI_COMM_WORLD_LOCAL_RANK, the log prefix) keep the real local rank.
  bool virtual_local_rank = false;
  // TORCHELASTIC_SIGNALS_TO_HANDLE (--signals-to-handle's text, which torchrun 2.13 leaves in its
  // workers' environment); not set when empty.
  std::string signals_to_handle;
};

// The environment of local rank `local_rank`: `base` (the agent's environment) overlaid with the
// contract. With extras.virtual_local_rank, `local_rank` must have an entry in the base's
// CUDA_VISIBLE_DEVICES (launch_options checks it) or CUDA_VISIBLE_DEVICES is left unchanged.
// OMP_NUM_THREADS=1 is added when unset and more than one worker runs on the node, and
// TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_ASYNC_ERROR_HANDLING=1 (the name torch < 2.2 reads)
// when the user set neither, as torchrun does. The pytorch set is always present, with
// DeepSpeed's launcher names CROSS_RANK (node rank), CROSS_SIZE (node count) and LOCAL_SIZE
// (workers on this node); --distribution mpi adds OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
// LOCAL_SIZE}, AZ_BATCH_MASTER_NODE=MASTER_ADDR:MASTER_PORT and AZ_BATCHAI_MPI_MASTER_NODE=
// MASTER_ADDR (Azure ML's names, which DeepSpeed 0.19's init_distributed reads on Azure ML);
// tensorflow adds TF_CONFIG.
EnvMap BuildWorkerEnv(const EnvMap& base, const NodeAssignment& a, int local_rank,
                      const WorkerEnvExtras& extras = {});

// TF_CONFIG for global rank `rank` of a job whose processes listen at `addresses` (host:port,
// indexed by global rank). The first `ps_count` ranks are parameter servers ("ps"), the next one
// the chief when `chief`, the rest workers; indices count within each task type. Example:
// {"cluster": {"ps": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker", "index": 0},
//  "environment": "cloud"}.
std::string BuildTfConfig(const std::vector<std::string>& addresses, int ps_count, bool chief,
                          int rank);

// The current process environment as a map.
EnvMap CurrentEnvironment();

// "KEY=VALUE" strings for execve.
std::vector<std::string> ToEnvStrings(const EnvMap& env);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_WORKER_ENV_H_
