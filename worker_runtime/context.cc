#include "dgt/worker/context.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dgt::worker {
namespace {

absl::Status ReadInt(const Context::Getenv& getenv, const char* name, bool required,
                     int default_value, int min, int max_exclusive, const std::string& range,
                     int* out) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
    *out = default_value;
    return absl::OkStatus();
  }
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min || n >= max_exclusive) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be an integer in ", range, ", got '", v, "'"));
  }
  *out = n;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Context> Context::FromEnv(const Getenv& getenv_arg) {
  Getenv getenv = getenv_arg ? getenv_arg : [](const char* n) { return std::getenv(n); };
  Context c;
  constexpr int kMax = 1 << 30;
  absl::Status s = ReadInt(getenv, "WORLD_SIZE", true, 1, 1, kMax, "[1, 2^30)", &c.world_size);
  if (!s.ok()) return s;
  s = ReadInt(getenv, "RANK", true, 0, 0, c.world_size,
              absl::StrCat("[0, WORLD_SIZE=", c.world_size, ")"), &c.rank);
  if (!s.ok()) return s;
  s = ReadInt(getenv, "LOCAL_WORLD_SIZE", false, 1, 1, c.world_size + 1,
              absl::StrCat("[1, WORLD_SIZE=", c.world_size, "]"), &c.local_world_size);
  if (!s.ok()) return s;
  s = ReadInt(getenv, "LOCAL_RANK", true, 0, 0, c.local_world_size,
              absl::StrCat("[0, LOCAL_WORLD_SIZE=", c.local_world_size, ")"), &c.local_rank);
  if (!s.ok()) return s;
  const char* node_var = getenv("NODE_RANK") ? "NODE_RANK" : "GROUP_RANK";
  s = ReadInt(getenv, node_var, false, 0, 0, c.world_size,
              absl::StrCat("[0, WORLD_SIZE=", c.world_size, ")"), &c.node_rank);
  if (!s.ok()) return s;
  const char* addr = getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') return absl::InvalidArgumentError("MASTER_ADDR is not set");
  c.master_addr = addr;
  int port = 0;
  s = ReadInt(getenv, "MASTER_PORT", true, 0, 1, 65536, "[1, 65535]", &port);
  if (!s.ok()) return s;
  c.master_port = static_cast<uint16_t>(port);
  s = ReadInt(getenv, "TORCHELASTIC_RESTART_COUNT", false, 0, 0, kMax, "[0, 2^30)", &c.generation);
  if (!s.ok()) return s;
  if (const char* run = getenv("TORCHELASTIC_RUN_ID")) c.run_id = run;
  const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  c.agent_store = agent_store != nullptr && std::string(agent_store) == "True";
  return c;
}

}  // namespace dgt::worker
