// The parts of ParseDgtRunCommandLine (agent/flags/launch_options.h) shared by its three files,
// private to agent/:
//   launch_options.cc          the torchrun-compatible flag table (CLI11), PET_* defaults and the
//                              checks on the raw argv; fills a RawFlags and calls Validate.
//   launch_options_values.cc   one flag's text to its value (--nnodes, --nproc-per-node,
//                              --rdzv-conf, the numbers, the choices, the stream and signal lists).
//   launch_options_checks.cc   Validate: the flags against each other (aliases, the rendezvous
//                              and static forms, TensorFlow roles, the script).
// Every error is InvalidArgument naming the flag and the value (the script's absence is NotFound),
// and the first one found is returned: the checks run in a fixed order, so a command line with
// several mistakes always reports the same one.
//
// Thread-safety: plain functions over their arguments; getenv_fn must be safe to call.
#ifndef DGT_AGENT_FLAGS_LAUNCH_OPTIONS_INTERNAL_H_
#define DGT_AGENT_FLAGS_LAUNCH_OPTIONS_INTERNAL_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/flags/launch_options.h"

namespace dgt::agent::launch_internal {

// A usage error: InvalidArgument with `message`, which names the flag and the value.
inline absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

// Flags kept as text until Validate: numbers go through common/flag_parse.h, and aliases
// (--nnodes and --instance-count, ...) are compared before one wins.
struct RawFlags {
  std::string nnodes = "1:1";
  std::string instance_count;  // --instance-count: an alias of --nnodes.
  std::string nproc = "1";
  std::string process_count;  // --process-count-per-instance: an alias of --nproc-per-node.
  std::string rdzv_conf;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string signals = kDefaultSignalsToHandle;
  std::string log_format = "text";
  std::string distribution = "pytorch";
  std::string restart_policy = "group";
  std::string recovery_mode = "replace";
  std::string standby_workers = "0";
  std::string fork_server = "on";
  std::string spare_nodes = "0";
  std::string join_timeout = "600";
  std::string connect_timeout = "30";
  std::string stop_timeout = "30";
  std::string shutdown_timeout;  // --shutdown-timeout: torchrun 2.13's name of --stop-timeout.
  std::string numa_binding;      // Empty: not given.
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  std::string monitor_interval = "0.1";
  std::string hang_timeout = "0";
  std::string first_progress_timeout = "0";
  std::string max_restarts = "0";
  std::string node_rank;  // Empty: not given (rank 0 for a single node).
  std::string master_port;
  std::string worker_count = "0";
  std::string parameter_server_count = "0";
  // Whether the command line (or PET_*) gave these.
  bool nnodes_set = false;
  bool instance_count_set = false;
  bool nproc_set = false;
  bool process_count_set = false;
  bool join_timeout_set = false;
  bool master_addr_set = false;
  bool node_rank_set = false;    // --node-rank given (its value may be empty: refused).
  bool master_port_set = false;  // --master-port given (its value may be empty: refused).
  bool stop_timeout_set = false;
  bool shutdown_timeout_set = false;
  bool duplicate_stdout_set = false;
  bool duplicate_stderr_set = false;
};

// The --rdzv-conf keys that also have a flag of their own (--join-timeout), kept apart so that
// a disagreement can be refused.
struct RdzvConfTimeouts {
  std::optional<absl::Duration> join_timeout;  // join_timeout=
  std::optional<absl::Duration> timeout;       // timeout= (torch's older spelling of the same)
};

// --- launch_options_values.cc: one flag at a time ---

// "N" or "MIN:MAX" with 0 < MIN <= MAX (torchrun --nnodes) into o->min_nodes, o->max_nodes.
absl::Status ParseNnodes(const std::string& text, LaunchOptions* o);

// torchrun --nproc-per-node: an integer, "cpu", "gpu" or "auto" (GPUs, else CPUs) into
// o->nproc_per_node, at most 4096. GPUs are CUDA_VISIBLE_DEVICES' entries (from getenv_fn) when
// it is set, else the /dev/nvidiaN device nodes.
absl::Status ParseNproc(const std::string& text, const char* (*getenv_fn)(const char*),
                        LaunchOptions* o);

// --rdzv-conf "k=v,k=v" (torchrun's keys; timeouts in seconds): is_host, last_call_timeout and
// read_timeout into `o`, join_timeout and timeout into `conf` (ResolveJoinTimeout compares them
// with --join-timeout). Unknown and repeated keys are refused.
absl::Status ParseRdzvConf(const std::string& text, LaunchOptions* o, RdzvConfTimeouts* conf);

// --rdzv-connect-timeout, --monitor-interval, --hang-timeout and --first-progress-timeout
// (seconds; the last two 0 for off, else at least kMinHangTimeout), --max-restarts, --node-rank,
// --master-port, --worker-count and --parameter-server-count into `o`, and o->master_port_set.
// A flag not given keeps its default; one given an empty value is refused ("needs a value").
absl::Status ParseNumbers(const RawFlags& raw, LaunchOptions* o);

// What reaches the console and the log files: -r/--redirects, -t/--tee, --local-ranks-filter,
// --signals-to-handle and the --duplicate-std{out,err}-filters, into `o`.
absl::Status ParseStreamFlags(const RawFlags& raw, LaunchOptions* o);

// The flags that take one of a fixed set of words, in this order: --event-log-handler,
// --numa-binding (refused whenever given: dgt-run does not bind workers to NUMA nodes),
// --log-format, --distribution, --restart-policy and --recovery-mode (shrink only with
// --restart-policy=rank).
absl::Status ParseChoices(const RawFlags& raw, LaunchOptions* o);

// --- launch_options_checks.cc: the flags against each other ---

// Checks `raw` and the flags CLI11 stored straight into `o`, fills the rest of `o`, and takes the
// script and its arguments from `rest` (what follows the flags, maybe starting with "--").
// getenv_fn supplies CUDA_VISIBLE_DEVICES, TORCH_ELASTIC_SHUTDOWN_TIMEOUT, DGT_PYTHON,
// PYTHON_EXEC and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
absl::Status Validate(const RawFlags& raw, const std::vector<std::string>& rest,
                      const char* (*getenv_fn)(const char*), LaunchOptions* o);

// --- launch_options_command.cc: the script ---

// The script and its arguments from `rest_in` (what follows the flags) into o->command, the
// checks that need it, then the interpreter (DGT_PYTHON, PYTHON_EXEC) and the console prefix
// (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) from getenv_fn. Errors: InvalidArgument for a missing
// script or flags that exclude each other; NotFound for a script that does not exist.
absl::Status ResolveCommand(const std::vector<std::string>& rest_in,
                            const char* (*getenv_fn)(const char*), LaunchOptions* o);

}  // namespace dgt::agent::launch_internal

#endif  // DGT_AGENT_FLAGS_LAUNCH_OPTIONS_INTERNAL_H_
