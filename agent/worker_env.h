// The environment contract every worker starts with (REFERENCE.md §1, docs/ENVIRONMENT.md):
// RANK, LOCAL_RANK, WORLD_SIZE, ... set on top of the agent's own environment.
#ifndef DGT_AGENT_WORKER_ENV_H_
#define DGT_AGENT_WORKER_ENV_H_

#include <map>
#include <string>
#include <vector>

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

// The environment of local rank `local_rank`: `base` (the agent's environment) overlaid with the
// contract. OMP_NUM_THREADS=1 is added when unset and more than one worker runs on the node, and
// TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when unset, as torchrun does.
EnvMap BuildWorkerEnv(const EnvMap& base, const NodeAssignment& a, int local_rank);

// The current process environment as a map.
EnvMap CurrentEnvironment();

// "KEY=VALUE" strings for execve.
std::vector<std::string> ToEnvStrings(const EnvMap& env);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKER_ENV_H_
