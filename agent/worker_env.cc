#include "agent/worker_env.h"

#include "absl/strings/str_cat.h"

extern char** environ;

namespace dgt::agent {

EnvMap BuildWorkerEnv(const EnvMap& base, const NodeAssignment& a, int local_rank) {
  EnvMap env = base;
  const std::string rank = absl::StrCat(a.first_global_rank + local_rank);
  env["RANK"] = rank;
  env["LOCAL_RANK"] = absl::StrCat(local_rank);
  env["WORLD_SIZE"] = absl::StrCat(a.world_size);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(a.local_world_size);
  env["NODE_RANK"] = absl::StrCat(a.node_rank);
  env["GROUP_RANK"] = absl::StrCat(a.node_rank);
  env["GROUP_WORLD_SIZE"] = absl::StrCat(a.node_count);
  env["ROLE_NAME"] = "default";
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = absl::StrCat(a.world_size);
  env["MASTER_ADDR"] = a.master_addr;
  env["MASTER_PORT"] = absl::StrCat(a.master_port);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RUN_ID"] = a.run_id;
  env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(a.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(a.max_restarts);
  if (a.local_world_size > 1) env.try_emplace("OMP_NUM_THREADS", "1");
  env.try_emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  return env;
}

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::vector<std::string> ToEnvStrings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

}  // namespace dgt::agent
