// LaunchOptions: everything `dgt-run` was asked to do, parsed and validated from a
// torchrun-compatible command line (torchrun 2.x flag set, REFERENCE.md §2). Every multi-word
// flag accepts dash and underscore spellings, and most default from a PET_<NAME> environment
// variable as in torchrun (PET_NPROC_PER_NODE, PET_NNODES, PET_RDZV_ENDPOINT, ...).
#ifndef DGT_AGENT_FLAGS_LAUNCH_OPTIONS_H_
#define DGT_AGENT_FLAGS_LAUNCH_OPTIONS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/flags/health_flags.h"

namespace dgt::agent {

// Which of a worker's streams go to files (torchrun -r/--redirects and -t/--tee): a bit set,
// 1 = stdout, 2 = stderr, 3 = both; either one value for every local rank ("3") or per local
// rank ("0:1,1:2"; ranks not listed get 0).
struct StreamSpec {
  int all = 0;
  std::map<int, int> per_rank;
  // The bit set for `local_rank`.
  int For(int local_rank) const;
};

// Parses "3" or "0:1,1:2". `flag` names the flag in errors.
// Errors: InvalidArgument, e.g. "--redirects must be 0..3 or LOCAL_RANK:0..3,..., got '4'".
absl::StatusOr<StreamSpec> ParseStreamSpec(absl::string_view text, absl::string_view flag);

// Parses "SIGTERM,SIGUSR1,15" (names with or without SIG, or numbers) into signal numbers.
// Errors: InvalidArgument naming the unknown entry.
absl::StatusOr<std::vector<int>> ParseSignalList(absl::string_view text);

// torchrun 2.13's default --signals-to-handle (run.py): the signals that stop the job.
inline constexpr char kDefaultSignalsToHandle[] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// Splits a --duplicate-stdout-filters value at commas, ",," standing for a literal comma, as
// torchrun 2.13's comma_separated_list does: "a,b" -> {"a", "b"}; "a,,b" -> {"a,b"};
// "a,,,b" -> {"a,", "b"}. Empty items are kept ("" -> {""}, "a," -> {"a", ""}), as there: an
// empty filter matches every line.
std::vector<std::string> SplitDuplicateFilters(absl::string_view text);

// The --numa-binding modes torchrun 2.13 accepts (torch.numa.binding.AffinityMode).
inline constexpr const char* kNumaBindingModes[] = {"node", "socket", "exclusive", "core-complex"};

// The event handlers torchrun 2.13's --event-log-handler names (torch.distributed.elastic.events
// .handlers): dgt-run accepts them and ignores them (its agent log reports the run's events).
inline constexpr const char* kEventLogHandlers[] = {"console", "dynamic_rendezvous", "null"};

enum class Distribution { kPytorch, kTensorflow, kMpi };
enum class RestartPolicy { kGroup, kRank };
// What --restart-policy rank does with a failed rank (docs/RECOVERY.md): start a replacement
// with the same RANK (kReplace), or go on without it (kShrink). Exported to workers as
// DGT_RECOVERY_MODE=replace|shrink.
enum class RecoveryMode { kReplace, kShrink };
enum class LogFormat { kText, kJson };

struct LaunchOptions {
  int min_nodes = 1;  // --nnodes MIN[:MAX] (--instance-count).
  int max_nodes = 1;
  int nproc_per_node = 1;  // --nproc-per-node (--process-count-per-instance).
  // "host:port" of the rendezvous service; empty with --standalone (embedded on a free port). Or
  // the replicas of one dgt-rendezvous service, "a:29400,b:29400" (replica/endpoint_list.h
  // ParseEndpointList; the agent tries them in turn, replica/endpoint_rotation.h).
  std::string rdzv_endpoint;
  std::string rdzv_backend = "static";  // static, c10d or dgt: all use dgt's rendezvous.
  std::string run_id = "none";          // --rdzv-id (torchrun's default is "none").
  bool standalone = false;
  int max_restarts = 0;
  RestartPolicy restart_policy = RestartPolicy::kGroup;
  RecoveryMode recovery_mode = RecoveryMode::kReplace;  // --recovery-mode (policy rank only).
  // --standby-workers: warm standby processes per node that replace failed ranks (policy rank,
  // mode replace only; docs/RECOVERY.md "Warm standbys"). 0: none.
  int standby_workers = 0;
  // --fork-server on|off: with --restart-policy rank in replace mode and no standbys, one
  // pre-imported Python process per node forks failed ranks' replacements (docs/RECOVERY.md
  // "Fork server"). Off: replacements are fresh processes.
  bool fork_server = true;
  // --spare-nodes: waiting nodes the run holds as hot spares instead of growing the world
  // (docs/RENDEZVOUS.md "Hot spare nodes"); sent in the JoinRequest, the run's first join sets it.
  int spare_nodes = 0;
  bool no_python = false;
  bool module = false;     // -m: run the script as a Python module.
  bool run_path = false;   // --run-path: python -c "runpy.run_path(...)".
  std::string local_addr;  // Address advertised to other nodes (--local-addr).
  std::string node_id;     // Default "<hostname>:<pid>".
  std::string role = "default";
  // Static backend (--node-rank, --master-addr, --master-port). master_port_set tells whether
  // --master-port (or PET_MASTER_PORT) was given: then a single node's store listens there.
  int node_rank = -1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_set = false;
  double join_timeout_s = 600;  // Wait for the round to close (--rdzv-conf join_timeout).
  // The flag that set join_timeout_s, for messages: "--join-timeout" (also the default),
  // "--rdzv-conf join_timeout" or "--rdzv-conf timeout".
  std::string join_timeout_flag = "--join-timeout";
  double last_call_timeout_s = 30;  // --rdzv-conf last_call_timeout.
  double connect_timeout_s = 30;    // Reach the rendezvous endpoint (--rdzv-connect-timeout).
  // After losing the rendezvous service: how long to reconnect (workers keep running) before the
  // agent gives up with exit 69 (--rdzv-conf read_timeout; torchrun's default is 60 s too).
  double reconnect_timeout_s = 60;
  // --rdzv-conf is_host: whether this agent hosts the rendezvous service at --rdzv-endpoint
  // (agent/coord/rendezvous_host.h); unset: when the endpoint is this host's and nothing serves it.
  std::optional<bool> rdzv_is_host;
  // Rendezvous transport security: TLS CA (turns TLS on), client certificate and key (mutual
  // TLS), and a file holding the service's bearer token.
  std::string rdzv_tls_ca;
  std::string rdzv_tls_cert;
  std::string rdzv_tls_key;
  std::string rdzv_token_file;
  // SIGTERM → SIGKILL grace when stopping workers: --stop-timeout, or its torchrun 2.13 alias
  // --shutdown-timeout, else $TORCH_ELASTIC_SHUTDOWN_TIMEOUT (as torchrun), else 30 s.
  double stop_timeout_s = 30;
  // Hang detection (docs/RECOVERY.md "Hang detection"), seconds, 0 = off: a worker without a
  // progress report for --hang-timeout since its last one, or for --first-progress-timeout since
  // its start, is killed as a failed worker (its stacks written first).
  double hang_timeout_s = 0;
  double first_progress_timeout_s = 0;
  // Node health checks (docs/RECOVERY.md "Node health checks"; agent/flags/health_flags.h).
  HealthFlags health;
  double monitor_interval_s = 0.1;     // Accepted for torchrun compatibility; exits are events.
  std::string start_method = "spawn";  // Accepted; workers are always fork/exec'ed.
  // Signals forwarded to every worker's process group (default kDefaultSignalsToHandle, as
  // torchrun 2.13). SIGUSR1/SIGUSR2, when listed, are forwarded only; the others also stop the
  // job.
  std::vector<int> signals_to_handle;
  // The flag's text, as given: torchrun 2.13 exports it to its workers as
  // TORCHELASTIC_SIGNALS_TO_HANDLE (torch.distributed.launcher.api).
  std::string signals_to_handle_text = kDefaultSignalsToHandle;
  // --event-log-handler (one of kEventLogHandlers) and --logs-specs (a torchrun.logs_specs entry
  // point name; empty when not given): accepted for torchrun 2.13 compatibility, not used.
  std::string event_log_handler = "null";
  std::string logs_specs;
  // Logs: <log_dir>/<run_id>_<unique>/attempt_<n>/<local_rank>/{stdout,stderr}.log and
  // error.json, a new directory per launch (agent/workers/log_dir.h). run_id has no '/' and no
  // "..".
  std::string log_dir;
  StreamSpec redirects;              // Streams written to the files only.
  StreamSpec tee;                    // Streams written to the files and the console.
  std::set<int> local_ranks_filter;  // Local ranks that reach the console; empty = all.
  // --duplicate-stdout-filters / --duplicate-stderr-filters (torchrun 2.13): lines of the tee'd
  // (-t) streams of the ranks shown on the console that contain any of these strings are also
  // written, prefixed as on the console, to <attempt dir>/filtered_stdout.log (filtered_stderr
  // .log). Empty: no such file.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (torchrun 2.13): the console prefix of each worker's
  // lines, with ${rank}, ${local_rank} and ${role_name} substituted (ExpandLogLinePrefix); empty:
  // the default "[rank<N>]: ".
  std::string log_line_prefix_template;
  LogFormat log_format = LogFormat::kText;
  Distribution distribution = Distribution::kPytorch;
  // --distribution tensorflow: parameter servers take the first global ranks, then the chief
  // (with --tf-chief), then the workers.
  int worker_count = 0;  // 0: every process that is not a ps or the chief.
  int parameter_server_count = 0;
  bool tf_chief = false;
  bool pass_local_rank_arg = false;  // Append --local_rank=N to the script's arguments.
  // --virtual-local-rank (torchrun 2.13): every worker gets LOCAL_RANK=0 and
  // CUDA_VISIBLE_DEVICES set to its own device only (entry LOCAL_RANK of the agent's
  // CUDA_VISIBLE_DEVICES, or LOCAL_RANK itself when that is unset).
  bool virtual_local_rank = false;
  // Interpreter for scripts: $PYTHON_EXEC (torchrun's override), else $DGT_PYTHON, else
  // "python3" from PATH.
  std::string python = "python3";
  // The training script (or program with --no-python, or module with -m) and its arguments.
  std::vector<std::string> command;
  // Flags accepted but without effect here, one line each without a prefix (dgt-run prints them
  // as warnings at start), e.g. "--local-ranks-filter=5: ...".
  std::vector<std::string> warnings;
  // Where the settings a scheduler can give came from, for the log at start, e.g.
  // "nnodes=2 (SLURM_NNODES), node-rank=1 (SLURM_NODEID), ...". Empty when no PET_* variable and
  // no scheduler supplied any (every value from a flag or the default).
  std::string setting_sources;
};

// The result of parsing a command line: options to run, or an exit code plus text to print
// (for --help, --version and usage errors).
struct ParsedCommandLine {
  std::optional<LaunchOptions> options;
  int exit_code = 0;
  std::string output;  // For stdout when exit_code is 0, else for stderr.
};

// Parses dgt-run's arguments (argv[0] excluded): every option of torchrun 2.13's parser is
// accepted in its dash and underscore spellings, and "--" ends the flags (the next argument is
// the script even if it starts with '-'). Usage errors give exit code 2 and a one-line message
// naming the flag and value, e.g. "--nproc-per-node must be >= 1, got 0".
// `getenv_fn` supplies PYTHON_EXEC, DGT_PYTHON, CUDA_VISIBLE_DEVICES,
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, the PET_* defaults and
// the scheduler's variables (a seam for tests). A setting neither a flag nor PET_* gives comes
// from Slurm or Kubernetes when dgt-run runs under one (agent/flags/scheduler_env.h), except with
// --standalone; node rank, master address and port only for the static form (no
// --rdzv-endpoint). `own_fqdn_fn` names this pod for Kubernetes (default OwnFqdn).
ParsedCommandLine ParseDgtRunCommandLine(const std::vector<std::string>& args,
                                         const char* (*getenv_fn)(const char*) = nullptr,
                                         std::string (*own_fqdn_fn)() = nullptr);

}  // namespace dgt::agent

#endif  // DGT_AGENT_FLAGS_LAUNCH_OPTIONS_H_
