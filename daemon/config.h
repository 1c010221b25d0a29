// dgt-agent's configuration file (/etc/dgt/agent.yaml, yaml-cpp): the keys of the jobs contract
// (docs/OPERATIONS.md "dgt-agent" lists them with their defaults). Parsing checks every key and
// value, so that `dgt-agent --check` and a SIGHUP reload refuse a bad file before it is used.
//
// Thread-compatible free functions.
#ifndef DGT_DAEMON_CONFIG_H_
#define DGT_DAEMON_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/flags/health_flags.h"
#include "rendezvous/credentials.h"

namespace dgt::daemon {

struct AgentConfig {
  // "host:port" of every dgt-rendezvous replica, tried in order (required, >= 1).
  std::vector<std::string> rendezvous_endpoints;
  // The node's name on the fleet and dgt-run's --node-id (default: the hostname).
  std::string node_name;
  // Address other nodes reach this one at (dgt-run --local-addr); empty: dgt-run decides.
  std::string advertise_address;
  std::map<std::string, std::string> labels;
  // Jobs run as this user; a user with uid 0 is refused unless allow_root.
  std::string run_as_user = "dgt";
  bool allow_root = false;
  // Absolute; each job gets <work_dir>/<job id>/.
  std::string work_dir = "/var/lib/dgt/jobs";
  // TLS to the service and the agents' bearer token (also passed to dgt-run).
  rendezvous::TlsFiles tls;
  std::string token_file;
  // Absolute path of dgt-run (default: dgt-run next to dgt-agent).
  std::string dgt_run;
  // SIGTERM -> SIGKILL grace, in seconds, for a job's processes when the daemon drains, and for
  // a CancelJob without grace_s.
  double stop_grace_s = 30;
  // WATCHDOG=1 pings; unset: on when systemd asks for them (WATCHDOG_USEC).
  std::optional<bool> watchdog;
  // The node's health checks, as dgt-run's flags give them (agent/flags/health_flags.h):
  // health_checks (commands), health_interval_s, health_check_timeout_s, expected_gpus,
  // min_free_disk (of work_dir) and min_shm_size, with dgt-run's defaults.
  agent::HealthFlags health;
};

// What the defaults depend on (the machine, the binary's location).
struct ConfigDefaults {
  std::string hostname;
  std::string dgt_run;
};

// Parses `yaml_text` (the contents of `file_name`, used in messages) and checks every value:
// - endpoints are host:port without blanks, each replica listed once (replica/endpoint_list.h
//   ParseEndpointList and FindSameReplica, as dgt-run's --rdzv-endpoint). Names that resolve to
//   one address, as "localhost:1" and "127.0.0.1:1", count as one.
// - advertise_address has no port.
// - label names are Kubernetes-style ([A-Za-z0-9._/-], 1..253 bytes, alphanumeric at both ends)
//   and values printable ASCII.
// - the run-as user exists (and is not root without allow_root).
// - paths are absolute; work_dir is a directory when it exists.
// - TLS and token files are readable and well-formed.
// - dgt_run is an executable regular file.
// - 0 < stop_grace_s <= 3600.
// - health_checks is a list of non-blank commands; health_interval_s is 0 or 0.1 s to a year,
//   health_check_timeout_s 0.1 s to a year; 0 <= expected_gpus <= 4096; min_free_disk and
//   min_shm_size are sizes as dgt-run's flags take them (64M, 1.5G; agent::ParseByteSize).
// Errors: InvalidArgument, "<file_name>: <key path>: <what>, got <value>". For a YAML syntax
// error or a key that is not a string: "<file_name>:<line>:<column>: <message>". An unknown key
// names it.
absl::StatusOr<AgentConfig> ParseAgentConfig(absl::string_view yaml_text,
                                             absl::string_view file_name,
                                             const ConfigDefaults& defaults);

// The most bytes of agent.yaml LoadAgentConfig reads (1 MiB): `--config /dev/zero` stops there.
inline constexpr int64_t kMaxConfigFileBytes = 1 << 20;

// Reads `path` (at most kMaxConfigFileBytes) and parses it. Errors: InvalidArgument naming the
// path when it cannot be read ("<path>: cannot read the config file (<strerror>)"), is a directory
// ("<path>: is a directory, not a config file") or is longer ("<path>: larger than 1048576 bytes,
// the limit of a config file"), else as ParseAgentConfig.
absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path,
                                            const ConfigDefaults& defaults);

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_CONFIG_H_
