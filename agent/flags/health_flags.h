// dgt-run's node health flags (docs/CLI.md "Node health checks", docs/RECOVERY.md): HealthFlags,
// the values LaunchOptions carries, and the two steps ParseDgtRunCommandLine takes for them:
// AddHealthFlags (the flag table) and ParseHealthFlags (text to values, with the limits).
//
// Thread-compatible: plain functions over their arguments.
#ifndef DGT_AGENT_FLAGS_HEALTH_FLAGS_H_
#define DGT_AGENT_FLAGS_HEALTH_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dgt::agent {

// The shortest health interval (other than 0) and check timeout.
inline constexpr absl::Duration kMinHealthPeriod = absl::Milliseconds(100);
// The most GPUs --expected-gpus takes.
inline constexpr int kMaxGpus = 4096;

struct HealthFlags {
  // --health-check CMD, repeatable: run with /bin/sh -c; exit 0 is healthy.
  std::vector<std::string> commands;
  // --health-interval: seconds between rounds while the node runs; 0: only before the join.
  double interval_s = 60;
  // --health-check-timeout: the longest one user check may run, seconds.
  double check_timeout_s = 60;
  // --expected-gpus: the /dev/nvidiaN nodes this node must have; -1: not checked.
  int expected_gpus = -1;
  // --min-free-disk: bytes free in the log dir and the work dir; 0 (the default): not checked.
  // Off unless asked for: a job's own checkpoints fill its disk, and a fixed bound would stop
  // runs that torchrun runs.
  uint64_t min_free_disk = 0;
  // --min-shm-size: the least size of /dev/shm, bytes (it must be writable whatever this is).
  uint64_t min_shm_size = uint64_t{64} << 20;
};

// The flags as text until ParseHealthFlags.
struct RawHealthFlags {
  std::vector<std::string> commands;
  std::string interval = "60";
  std::string check_timeout = "60";
  std::string expected_gpus;  // Empty: not given.
  std::string min_free_disk = "0";
  std::string min_shm_size = "64M";
};

// Parses a size: bytes, or a number with K, M, G or T (powers of 1024; "1.5G" allowed), at most
// 2^60. `flag` names the flag in errors.
// Errors: InvalidArgument, e.g. "--min-free-disk must be a size (bytes, or with K, M, G, T), got
// '1X'".
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view flag, absl::string_view text);

// Adds the health flags to `app` under the group "Node health checks", storing into `raw`
// (which outlives the parse).
void AddHealthFlags(CLI::App& app, RawHealthFlags* raw);

// Parses `raw` into `out`. Errors: InvalidArgument naming the flag and the value (an interval
// below 0.1 s other than 0, a timeout below 0.1 s, a negative GPU count, an empty command).
absl::Status ParseHealthFlags(const RawHealthFlags& raw, HealthFlags* out);

}  // namespace dgt::agent

#endif  // DGT_AGENT_FLAGS_HEALTH_FLAGS_H_
