#include "agent/workers/worker_env.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace dgt::agent {

EnvMap BuildWorkerEnv(const EnvMap& base, const NodeAssignment& a, int local_rank,
                      const WorkerEnvExtras& extras) {
  EnvMap env = base;
  const std::string rank = absl::StrCat(a.first_global_rank + local_rank);
  env["RANK"] = rank;
  env["LOCAL_RANK"] = absl::StrCat(local_rank);
  env["WORLD_SIZE"] = absl::StrCat(a.world_size);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(a.local_world_size);
  env["NODE_RANK"] = absl::StrCat(a.node_rank);
  env["GROUP_RANK"] = absl::StrCat(a.node_rank);
  env["GROUP_WORLD_SIZE"] = absl::StrCat(a.node_count);
  // DeepSpeed's launcher (deepspeed/launcher/launch.py 0.19) names the same three numbers
  // CROSS_RANK, CROSS_SIZE and LOCAL_SIZE; its CPU accelerator counts devices by LOCAL_SIZE.
  env["CROSS_RANK"] = absl::StrCat(a.node_rank);
  env["CROSS_SIZE"] = absl::StrCat(a.node_count);
  env["LOCAL_SIZE"] = absl::StrCat(a.local_world_size);
  env["ROLE_NAME"] = extras.role;
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = absl::StrCat(a.world_size);
  env["MASTER_ADDR"] = a.master_addr;
  env["MASTER_PORT"] = absl::StrCat(a.master_port);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RUN_ID"] = a.run_id;
  env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(a.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(a.max_restarts);
  if (a.local_world_size > 1) env.try_emplace("OMP_NUM_THREADS", "1");
  // torch >= 2.2 reads TORCH_NCCL_ASYNC_ERROR_HANDLING (the old name only as a fallback), torch
  // before 2.2 only NCCL_ASYNC_ERROR_HANDLING: set both, unless the user chose a value under
  // either name (adding the other would override that choice in one of them).
  if (env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0 &&
      env.count("NCCL_ASYNC_ERROR_HANDLING") == 0) {
    // std::string("1"), not "1": gcc 12 -O3 warns -Wrestrict on assigning the literal.
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = std::string("1");
    env["NCCL_ASYNC_ERROR_HANDLING"] = std::string("1");
  }
  if (!extras.error_file.empty()) env["TORCHELASTIC_ERROR_FILE"] = extras.error_file;
  if (!extras.signals_to_handle.empty()) {
    env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = extras.signals_to_handle;
  }
  if (extras.virtual_local_rank) {
    env["LOCAL_RANK"] = "0";
    auto visible = base.find("CUDA_VISIBLE_DEVICES");
    if (visible == base.end()) {
      env["CUDA_VISIBLE_DEVICES"] = absl::StrCat(local_rank);
    } else {
      std::vector<absl::string_view> devices = absl::StrSplit(visible->second, ',');
      if (local_rank < static_cast<int>(devices.size())) {
        env["CUDA_VISIBLE_DEVICES"] = std::string(absl::StripAsciiWhitespace(devices[local_rank]));
      }
    }
  }
  switch (extras.distribution) {
    case Distribution::kPytorch:
      break;
    case Distribution::kMpi:
      env["OMPI_COMM_WORLD_RANK"] = rank;
      env["OMPI_COMM_WORLD_SIZE"] = absl::StrCat(a.world_size);
      env["OMPI_COMM_WORLD_LOCAL_RANK"] = absl::StrCat(local_rank);
      env["OMPI_COMM_WORLD_LOCAL_SIZE"] = absl::StrCat(a.local_world_size);
      env["AZ_BATCH_MASTER_NODE"] = absl::StrCat(a.master_addr, ":", a.master_port);
      // Azure ML's single-node form of the master's address (no port); DeepSpeed's
      // patch_aml_env_for_torch_nccl_backend reads it when the job has one node.
      env["AZ_BATCHAI_MPI_MASTER_NODE"] = a.master_addr;
      break;
    case Distribution::kTensorflow:
      env["TF_CONFIG"] = extras.tf_config;
      break;
  }
  return env;
}

std::string BuildTfConfig(const std::vector<std::string>& addresses, int ps_count, bool chief,
                          int rank) {
  nlohmann::ordered_json cluster = nlohmann::ordered_json::object();
  std::string type;
  int index = 0;
  for (int r = 0; r < static_cast<int>(addresses.size()); ++r) {
    std::string t = r < ps_count ? "ps" : (chief && r == ps_count ? "chief" : "worker");
    if (!cluster.contains(t)) cluster[t] = nlohmann::ordered_json::array();
    if (r == rank) {
      type = t;
      index = static_cast<int>(cluster[t].size());
    }
    cluster[t].push_back(addresses[r]);
  }
  nlohmann::ordered_json config;
  config["cluster"] = cluster;
  config["task"] = {{"type", type}, {"index", index}};
  config["environment"] = "cloud";
  return config.dump();
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
