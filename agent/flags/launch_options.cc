// ParseDgtRunCommandLine: dgt-run's flag table (torchrun 2.13's flags in CLI11, with dgt's and
// Azure ML's), the PET_* environment defaults, and the checks on the raw argv that CLI11 cannot
// make. The values are then parsed and checked by launch_internal::Validate
// (agent/flags/launch_options_internal.h).
#include "agent/flags/launch_options.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/flags/launch_options_internal.h"
#include "agent/flags/scheduler_env.h"
#include "common/version.h"

namespace dgt::agent {
namespace {

const char* RealGetenv(const char* name) { return std::getenv(name); }

// The first long name of a CLI11 name list: "-r,--redirects" -> "redirects".
std::string LongName(const std::string& names) {
  size_t start = names.find("--") + 2;
  return names.substr(start, names.find(',', start) - start);
}

// "nproc-per-node" -> "PET_NPROC_PER_NODE" (torchrun's environment defaults).
std::string PetName(absl::string_view flag) {
  std::string name = absl::StrCat("PET_", flag);
  for (char& c : name) c = c == '-' ? '_' : absl::ascii_toupper(c);
  return name;
}

// One setting a scheduler can give (agent/flags/scheduler_env.h).
struct SchedulerTarget {
  const char* name;    // The flag's name without "--".
  CLI::Option* opt;    // The flag.
  CLI::Option* alias;  // An alias that gives the same setting, or null.
  bool static_only;    // Used only by the static form (no --rdzv-endpoint).
  bool on_command_line = false;
};

// Fills the settings that neither a flag nor PET_* gave from the scheduler's variables, and
// writes where each came from to `*sources` when any came from the environment, and to
// `*warning` a Kubernetes pod left without a node count. Errors: the
// scheduler's (several srun tasks on one node), or a setting it cannot supply that nothing else
// gave (a missing SLURM_NODEID, a bad SLURM_JOB_NODELIST).
absl::Status ApplySchedulerDefaults(const char* (*getenv_fn)(const char*),
                                    std::string (*own_fqdn_fn)(), const LaunchOptions& o,
                                    const std::vector<SchedulerTarget>& targets,
                                    std::string* sources, std::string* warning) {
  SchedulerDefaults d;
  if (!o.standalone) {
    auto read = ReadSchedulerDefaults(getenv_fn, own_fqdn_fn);
    if (!read.ok()) return read.status();
    d = *std::move(read);
  }
  const bool static_form = o.rdzv_endpoint.empty() && o.rdzv_backend == "static";
  const std::optional<SchedulerSetting>* settings[] = {
      &d.nnodes, &d.node_rank, &d.master_addr, &d.master_port, &d.run_id, &d.nproc_per_node};
  std::vector<std::string> parts;
  bool from_env = d.scheduler != Scheduler::kNone;
  bool several_nodes = false;  // The static form's settings matter only then.
  for (size_t i = 0; i < targets.size(); ++i) {
    const SchedulerTarget& t = targets[i];
    const std::optional<SchedulerSetting>& setting = *settings[i];
    const bool usable = setting.has_value() && (!t.static_only || (static_form && several_nodes));
    std::string source;
    if (t.on_command_line) {
      source = absl::StrCat("--", t.name);
    } else if (t.opt->count() > 0) {
      source = PetName(t.name);
      from_env = true;
    } else if (usable) {
      if (!setting->error.empty()) return absl::InvalidArgumentError(setting->error);
      t.opt->add_result(setting->value);
      t.opt->run_callback();
      source = setting->source;
    } else {
      continue;  // The default, not worth a word.
    }
    const CLI::Option* shown = t.opt->count() > 0 || t.alias == nullptr ? t.opt : t.alias;
    const std::string value = shown->as<std::string>();
    std::string note;
    if (usable && source != setting->source && setting->error.empty() && value != setting->value) {
      note = absl::StrCat("; ", setting->source, " gives ", setting->value, ", not used");
    }
    parts.push_back(absl::StrCat(t.name, "=", value, " (", source, note, ")"));
    if (t.opt == targets.front().opt) several_nodes = value != "1" && value != "1:1";
  }
  if (from_env && !parts.empty()) *sources = absl::StrJoin(parts, ", ");
  const SchedulerTarget& nnodes = targets.front();
  if (d.scheduler == Scheduler::kKubernetes && !nnodes.on_command_line &&
      nnodes.opt->count() == 0) {
    // Kubernetes gives no node count: each pod of an Indexed Job would run a job of its own.
    *warning = absl::StrCat(
        "JOB_COMPLETION_INDEX is set but --nnodes is not: this pod runs a one-node job of its "
        "own; give --nnodes (the Job's completions) for one job across the pods, or --nnodes=1 "
        "to say so");
  }
  return absl::OkStatus();
}

}  // namespace

ParsedCommandLine ParseDgtRunCommandLine(const std::vector<std::string>& args,
                                         const char* (*getenv_fn)(const char*),
                                         std::string (*own_fqdn_fn)()) {
  if (getenv_fn == nullptr) getenv_fn = RealGetenv;
  LaunchOptions o;
  launch_internal::RawFlags raw;

  CLI::App app{
      "dgt-run: launch a distributed training job (torchrun-compatible).\n"
      "Usage: dgt-run [flags] [--] script.py [script args]\n"
      "Flags default from PET_<FLAG> environment variables, as in torchrun. The script runs\n"
      "with $PYTHON_EXEC, else $DGT_PYTHON, else python3; $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE\n"
      "(${rank}, ${local_rank}, ${role_name}) replaces the [rank<N>]: prefix of worker lines.",
      "dgt-run"};
  app.prefix_command();
  app.get_formatter()->column_width(46);
  // A repeated flag takes its last value, as torchrun's argparse does.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Options that take their default from PET_<NAME> when not on the command line.
  std::vector<std::pair<CLI::Option*, std::string>> pet;
  auto add = [&](const std::string& names, auto& target, const std::string& help,
                 const std::string& group) {
    CLI::Option* opt = app.add_option(names, target, help)->group(group)->capture_default_str();
    if (group != "Azure ML aliases") pet.emplace_back(opt, PetName(LongName(names)));
    return opt;
  };
  // torchrun 2.13 reads no PET_ variable for --logs-specs and --numa-binding.
  auto add_no_env = [&](const std::string& names, std::string& target, const std::string& help,
                        const std::string& group) {
    return app.add_option(names, target, help)->group(group);
  };
  // Long names ("--standalone", "--no_python") of the flags that take no value.
  std::vector<std::string> store_true_names;
  auto flag = [&](const std::string& names, bool& target, const std::string& help,
                  const std::string& group) {
    CLI::Option* opt = app.add_flag(names, target, help)->group(group);
    pet.emplace_back(opt, PetName(LongName(names)));
    for (absl::string_view name : absl::StrSplit(names, ',')) {
      if (absl::StartsWith(name, "--")) store_true_names.emplace_back(name);
    }
    return opt;
  };

  const std::string kNodes = "Nodes and workers";
  CLI::Option* nnodes_opt = add("--nnodes", raw.nnodes, "Number of nodes: N or MIN:MAX", kNodes);
  CLI::Option* nproc_opt = add("--nproc-per-node,--nproc_per_node", raw.nproc,
                               "Workers per node: N, auto, cpu or gpu", kNodes);
  add("--role", o.role, "Role of this node's workers (ROLE_NAME)", kNodes);
  flag("--no-python,--no_python", o.no_python, "Run the command directly instead of with python -u",
       kNodes);
  flag("-m,--module", o.module, "Run the script as a Python module (python -u -m)", kNodes);
  flag("--run-path,--run_path", o.run_path, "Run the script with runpy.run_path", kNodes);
  flag("--pass-local-rank-arg,--pass_local_rank_arg", o.pass_local_rank_arg,
       "Append --local_rank=N to the script's arguments", kNodes);
  add("--distribution", raw.distribution,
      "Env contract: pytorch, tensorflow (TF_CONFIG) or mpi (OMPI_COMM_WORLD_*)", kNodes);
  flag("--virtual-local-rank,--virtual_local_rank", o.virtual_local_rank,
       "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES set to its own device", kNodes);
  add_no_env("--numa-binding,--numa_binding", raw.numa_binding,
             "node, socket, exclusive or core-complex: accepted, then refused (not supported)",
             kNodes);

  const std::string kRdzv = "Rendezvous";
  flag("--standalone", o.standalone, "Single node; rendezvous and store embedded on free ports",
       kRdzv);
  add("--rdzv-backend,--rdzv_backend", o.rdzv_backend,
      "static, c10d or dgt: all use dgt's rendezvous (etcd: use dgt-rendezvous)", kRdzv);
  add("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
      "Rendezvous service HOST[:PORT] (default port 29400; IPv6 as [addr]:port), or several "
      "replicas of dgt-rendezvous: HOST:PORT,HOST:PORT,...",
      kRdzv);
  CLI::Option* run_id_opt =
      add("--rdzv-id,--rdzv_id", o.run_id, "Run id shared by every node of the job", kRdzv);
  add("--rdzv-conf,--rdzv_conf", raw.rdzv_conf,
      "key=value,...: join_timeout, last_call_timeout (seconds), is_host (true/false, 1/0), "
      "read_timeout (seconds to reconnect to a lost service, default 60); close_timeout, "
      "keep_alive_interval, keep_alive_max_attempt, timeout accepted for compatibility",
      kRdzv);
  add("--local-addr,--local_addr", o.local_addr,
      "IP (or name, resolved here) other nodes reach this node at", kRdzv);
  add("--node-id,--node_id", o.node_id, "Node identity (default hostname:pid)", kRdzv);
  CLI::Option* join_timeout_opt =
      add("--join-timeout,--join_timeout", raw.join_timeout,
          "Seconds to wait for the round to close (same as --rdzv-conf join_timeout)", kRdzv)
          ->type_name("SECONDS");
  add("--rdzv-connect-timeout,--rdzv_connect_timeout", raw.connect_timeout,
      "Seconds to keep trying to reach the rendezvous endpoint", kRdzv)
      ->type_name("SECONDS");
  add("--rdzv-tls-ca,--rdzv_tls_ca", o.rdzv_tls_ca,
      "PEM CA that signed the service's certificate (turns TLS on)", kRdzv);
  add("--rdzv-tls-cert,--rdzv_tls_cert", o.rdzv_tls_cert, "PEM client certificate for mutual TLS",
      kRdzv);
  add("--rdzv-tls-key,--rdzv_tls_key", o.rdzv_tls_key, "PEM client private key", kRdzv);
  add("--rdzv-token-file,--rdzv_token_file", o.rdzv_token_file,
      "File holding the rendezvous service's bearer token", kRdzv);

  const std::string kStatic = "Static rendezvous (torchrun --rdzv-backend=static)";
  CLI::Option* node_rank_opt = add("--node-rank,--node_rank", raw.node_rank,
                                   "Rank of this node with --rdzv-backend=static and --nnodes>1 "
                                   "(default 0)",
                                   kStatic)
                                   ->type_name("INT");
  CLI::Option* master_addr_opt = add(
      "--master-addr,--master_addr", o.master_addr,
      "Node rank 0's address: it hosts the store there (static; required for --nnodes>1)", kStatic);
  CLI::Option* master_port_opt =
      add("--master-port,--master_port", raw.master_port,
          "Store port (static, --nnodes>1: default 29500; one node: default a free port)", kStatic)
          ->type_name("INT");

  const std::string kSupervision = "Supervision and restarts";
  add("--max-restarts,--max_restarts", raw.max_restarts, "Restarts after failures", kSupervision)
      ->type_name("INT");
  add("--restart-policy,--restart_policy", raw.restart_policy,
      "group: restart every worker; rank: only the failed one", kSupervision);
  add("--recovery-mode,--recovery_mode", raw.recovery_mode,
      "With --restart-policy rank: replace (restart the failed rank) or shrink (go on without it)",
      kSupervision);
  add("--standby-workers,--standby_workers", raw.standby_workers,
      "With --restart-policy rank: warm standby processes per node, waiting in "
      "`import dgt.recovery`, that take a failed rank's place (default 0)",
      kSupervision)
      ->type_name("INT");
  add("--fork-server,--fork_server", raw.fork_server,
      "With --restart-policy rank (replace mode, no standbys): on, one pre-imported Python "
      "process per node forks failed ranks' replacements; off, fresh processes (default on)",
      kSupervision)
      ->type_name("on|off");
  add("--spare-nodes,--spare_nodes", raw.spare_nodes,
      "Waiting nodes the run holds as hot spares for lost nodes instead of growing the world "
      "(--nnodes MIN:MAX; with MIN == MAX every extra node is a spare; default 0)",
      kSupervision)
      ->type_name("INT");
  CLI::Option* stop_timeout_opt =
      add("--stop-timeout,--stop_timeout", raw.stop_timeout,
          "Seconds between SIGTERM and SIGKILL when stopping workers", kSupervision)
          ->type_name("SECONDS");
  CLI::Option* shutdown_timeout_opt =
      add("--shutdown-timeout,--shutdown_timeout", raw.shutdown_timeout,
          "Same as --stop-timeout (torchrun 2.13's name; default $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, "
          "else 30)",
          kSupervision)
          ->type_name("SECONDS");
  add("--hang-timeout,--hang_timeout", raw.hang_timeout,
      "A worker without a progress report (dgt.progress(), dgt.recovery.Trainer) for this long "
      "is hung: its stacks are written, then it fails as a crash would (default 0: off)",
      kSupervision)
      ->type_name("SECONDS");
  add("--first-progress-timeout,--first_progress_timeout", raw.first_progress_timeout,
      "The same from a worker's start to its first progress report (default 0: off)", kSupervision)
      ->type_name("SECONDS");
  add("--signals-to-handle,--signals_to_handle", raw.signals,
      "Signals forwarded to the workers; listed SIGUSR1/SIGUSR2 do not stop the job", kSupervision);
  add("--monitor-interval,--monitor_interval", raw.monitor_interval,
      "Accepted; worker exits are events, not polled", kSupervision)
      ->type_name("SECONDS");
  add("--start-method,--start_method", o.start_method,
      "spawn, fork or forkserver: accepted; workers are fork/exec'ed", kSupervision);

  RawHealthFlags raw_health;
  AddHealthFlags(app, &raw_health);

  const std::string kLogs = "Logs";
  add("--log-dir,--log_dir", o.log_dir,
      "Per launch, attempt and local rank: <dir>/<run id>_<unique>/attempt_<n>/<local rank>/",
      kLogs);
  add("-r,--redirects", raw.redirects,
      "Streams to files only: 3 or 0:1,1:2 (1 stdout, 2 stderr, 3 both)", kLogs);
  add("-t,--tee", raw.tee, "Streams to files and console: 3 or 0:1,1:2", kLogs);
  add("--local-ranks-filter,--local_ranks_filter", raw.local_ranks_filter,
      "Only these local ranks reach the console, e.g. 0,2", kLogs);
  CLI::Option* dup_out_opt =
      add("--duplicate-stdout-filters,--duplicate_stdout_filters", raw.duplicate_stdout_filters,
          "Tee'd stdout lines containing any of a,b (,, for a comma) also go to "
          "<attempt dir>/filtered_stdout.log",
          kLogs);
  CLI::Option* dup_err_opt =
      add("--duplicate-stderr-filters,--duplicate_stderr_filters", raw.duplicate_stderr_filters,
          "The same for stderr (filtered_stderr.log)", kLogs);
  add("--log-format,--log_format", raw.log_format, "Agent log: text or json (JSON lines)", kLogs);
  add("--event-log-handler,--event_log_handler", o.event_log_handler,
      "console, dynamic_rendezvous or null: accepted and ignored (the agent log has the events)",
      kLogs);
  add_no_env("--logs-specs,--logs_specs", o.logs_specs,
             "torchrun LogsSpecs entry point: accepted and ignored (dgt's log layout is fixed)",
             kLogs);

  const std::string kAzure = "Azure ML aliases";
  CLI::Option* instances_opt =
      add("--instance-count,--instance_count", raw.instance_count,
          "Same as --nnodes (must agree with it when both are given)", kAzure);
  CLI::Option* per_instance_opt =
      add("--process-count-per-instance,--process_count_per_instance", raw.process_count,
          "Same as --nproc-per-node (must agree with it when both are given)", kAzure);
  add("--worker-count,--worker_count", raw.worker_count,
      "tensorflow: workers (0: all but ps/chief)", kAzure)
      ->type_name("INT");
  add("--parameter-server-count,--parameter_server_count", raw.parameter_server_count,
      "tensorflow: parameter servers (first ranks)", kAzure)
      ->type_name("INT");
  flag("--tf-chief,--tf_chief", o.tf_chief, "tensorflow: the first non-ps rank is the chief",
       kAzure);
  app.set_version_flag("--version", absl::StrCat("dgt-run ", kVersion));

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ParsedCommandLine result;
  std::string empty_env;  // The first numeric PET_* default set to "": refused after parsing.
  absl::Status scheduler_error;
  std::string scheduler_warning;
  try {
    app.parse(reversed);
    // The settings a scheduler can give, and whether the command line gave them.
    std::vector<SchedulerTarget> targets = {{"nnodes", nnodes_opt, instances_opt, false},
                                            {"node-rank", node_rank_opt, nullptr, true},
                                            {"master-addr", master_addr_opt, nullptr, true},
                                            {"master-port", master_port_opt, nullptr, true},
                                            {"rdzv-id", run_id_opt, nullptr, false},
                                            {"nproc-per-node", nproc_opt, per_instance_opt, false}};
    for (SchedulerTarget& t : targets) {
      t.on_command_line = t.opt->count() > 0 || (t.alias != nullptr && t.alias->count() > 0);
    }
    // A PET_* default gives way to an explicit flag of the same setting (its alias included), as
    // torchrun's PET_* defaults do; only two explicit flags can disagree.
    const bool stop_given = stop_timeout_opt->count() > 0;
    const bool shutdown_given = shutdown_timeout_opt->count() > 0;
    for (auto& [opt, env] : pet) {
      const char* value = getenv_fn(env.c_str());
      const bool alias_given = (opt == nnodes_opt && instances_opt->count() > 0) ||
                               (opt == nproc_opt && per_instance_opt->count() > 0) ||
                               (opt == stop_timeout_opt && shutdown_given) ||
                               (opt == shutdown_timeout_opt && stop_given);
      if (opt->count() > 0 || alias_given || value == nullptr) continue;
      if (*value != '\0') {
        opt->add_result(std::string(value));
        opt->run_callback();
      } else if (empty_env.empty() &&
                 (opt->get_type_name() == "INT" || opt->get_type_name() == "SECONDS")) {
        // torchrun 2.13's argparse converts a PET_* default with the flag's type: an empty
        // PET_MAX_RESTARTS is "invalid int value: ''". An empty text default stays ignored.
        empty_env = absl::StrCat(env, " (the default of --", LongName(opt->get_name()),
                                 ") is set but empty: give a number or unset it");
      }
    }
    // Then SLURM_* or the Kubernetes index, for what neither gave.
    scheduler_error = ApplySchedulerDefaults(getenv_fn, own_fqdn_fn, o, targets, &o.setting_sources,
                                             &scheduler_warning);
  } catch (const CLI::CallForHelp&) {
    result.output = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.output = absl::StrCat("dgt-run ", kVersion, "\n");
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", e.what(), "\n");
    return result;
  }
  raw.nnodes_set = nnodes_opt->count() > 0;
  raw.instance_count_set = instances_opt->count() > 0;
  raw.nproc_set = nproc_opt->count() > 0;
  raw.process_count_set = per_instance_opt->count() > 0;
  raw.join_timeout_set = join_timeout_opt->count() > 0;
  raw.master_addr_set = master_addr_opt->count() > 0;
  raw.node_rank_set = node_rank_opt->count() > 0;
  raw.master_port_set = master_port_opt->count() > 0;
  raw.stop_timeout_set = stop_timeout_opt->count() > 0;
  raw.shutdown_timeout_set = shutdown_timeout_opt->count() > 0;
  raw.duplicate_stdout_set = dup_out_opt->count() > 0;
  raw.duplicate_stderr_set = dup_err_opt->count() > 0;
  absl::Status s;
  // "--flag=" with nothing after '=' makes CLI11 take the next argument as the value (often the
  // script): refuse it, naming the flag.
  const size_t flags_end = args.size() - app.remaining().size();
  for (size_t i = 0; i < flags_end; ++i) {
    const std::string& a = args[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=') {
      result.exit_code = 2;
      result.output = absl::StrCat("dgt-run: error: ", a.substr(0, a.size() - 1),
                                   " needs a value, got an empty one\n");
      return result;
    }
    // "--virtual-local-rank=1": torchrun 2.13's store_true flags refuse any value (argparse's
    // "ignored explicit argument"); CLI11 would take it as a boolean.
    const size_t eq = a.find('=');
    if (eq != std::string::npos && std::find(store_true_names.begin(), store_true_names.end(),
                                             a.substr(0, eq)) != store_true_names.end()) {
      result.exit_code = 2;
      result.output = absl::StrCat("dgt-run: error: ", a.substr(0, eq),
                                   " takes no value (a switch, as in torchrun 2.13), got '",
                                   a.substr(eq + 1), "'\n");
      return result;
    }
  }
  if (!scheduler_error.ok()) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", scheduler_error.message(), "\n");
    return result;
  }
  if (!empty_env.empty()) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", empty_env, "\n");
    return result;
  }
  s = launch_internal::Validate(raw, app.remaining(), getenv_fn, &o);
  if (s.ok()) s = ParseHealthFlags(raw_health, &o.health);
  if (!s.ok()) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", s.message(), "\n");
    return result;
  }
  if (!scheduler_warning.empty()) o.warnings.push_back(scheduler_warning);
  result.options = std::move(o);
  return result;
}

}  // namespace dgt::agent
