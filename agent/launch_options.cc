#include "agent/launch_options.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <limits>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "agent/log_dir.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "common/version.h"
#include "rendezvous/credentials.h"

namespace dgt::agent {
namespace {

// The most node ranks, workers per node, restarts or TensorFlow roles a flag accepts: far beyond
// any real job. The world (nodes times workers per node) is checked to fit an int on its own.
constexpr int64_t kMaxCount = 1000000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// The most workers one agent starts: beyond the largest nodes' cores and GPUs; more only fills
// pid_max and makes a stop signal wait for the spawning.
constexpr int kMaxNprocPerNode = 4096;

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

// "N" or "MIN:MAX" with 0 < MIN <= MAX (torchrun --nnodes).
absl::Status ParseNnodes(const std::string& text, LaunchOptions* o) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int lo = 0, hi = 0;
  bool ok = false;
  if (parts.size() == 1) {
    ok = absl::SimpleAtoi(parts[0], &lo);
    hi = lo;
  } else if (parts.size() == 2) {
    ok = absl::SimpleAtoi(parts[0], &lo) && absl::SimpleAtoi(parts[1], &hi);
  }
  if (!ok || lo < 1 || hi < lo) {
    return Bad(absl::StrCat("--nnodes must be N or MIN:MAX with 0 < MIN <= MAX, got '", text, "'"));
  }
  o->min_nodes = lo;
  o->max_nodes = hi;
  return absl::OkStatus();
}

// Visible NVIDIA GPUs: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN device nodes.
int CountGpus(const char* (*getenv_fn)(const char*)) {
  const char* visible = getenv_fn("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    int n = 0;
    for (absl::string_view d : absl::StrSplit(visible, ',', absl::SkipWhitespace())) {
      if (d == "-1") break;  // CUDA stops at the first invalid id.
      ++n;
    }
    return n;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    std::string name = entry.path().filename().string();
    int idx = 0;
    if (name.rfind("nvidia", 0) == 0 && absl::SimpleAtoi(name.substr(6), &idx)) ++n;
  }
  return n;
}

// torchrun --nproc-per-node: an integer, "cpu", "gpu" or "auto" (GPUs, else CPUs).
absl::Status ParseNproc(const std::string& text, const char* (*getenv_fn)(const char*),
                        LaunchOptions* o) {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (text == "cpu") {
    o->nproc_per_node = cpus;
  } else if (text == "gpu" || text == "auto") {
    int gpus = CountGpus(getenv_fn);
    if (gpus == 0 && text == "gpu") {
      return Bad("--nproc-per-node=gpu but no NVIDIA GPU is visible");
    }
    o->nproc_per_node = gpus > 0 ? gpus : cpus;
  } else {
    int n = 0;
    if (!absl::SimpleAtoi(text, &n)) {
      return Bad(
          absl::StrCat("--nproc-per-node must be an integer, auto, cpu or gpu, got '", text, "'"));
    }
    if (n < 1) return Bad(absl::StrCat("--nproc-per-node must be >= 1, got ", n));
    o->nproc_per_node = n;
  }
  if (o->nproc_per_node > kMaxNprocPerNode) {
    return Bad(absl::StrCat(
        "--nproc-per-node must be at most ", kMaxNprocPerNode, ", got ", o->nproc_per_node,
        text == absl::StrCat(o->nproc_per_node) ? "" : absl::StrCat(" ('", text, "')")));
  }
  return absl::OkStatus();
}

// --rdzv-conf keys torchrun's rendezvous handlers read (REFERENCE.md §2); anything else is a typo.
constexpr const char* kRdzvConfKeys[] = {
    "join_timeout", "last_call_timeout",   "close_timeout",          "read_timeout",
    "timeout",      "keep_alive_interval", "keep_alive_max_attempt", "is_host",
};

// The --rdzv-conf keys that also have a flag of their own (--join-timeout), kept apart so that
// a disagreement can be refused.
struct RdzvConfTimeouts {
  std::optional<absl::Duration> join_timeout;  // join_timeout=
  std::optional<absl::Duration> timeout;       // timeout= (torch's older spelling of the same)
};

// --rdzv-conf "k=v,k=v" (torchrun keys). Timeouts are seconds.
absl::Status ParseRdzvConf(const std::string& text, LaunchOptions* o, RdzvConfTimeouts* conf) {
  std::vector<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Bad(absl::StrCat("--rdzv-conf entries must be key=value, got '", item, "'"));
    }
    const std::string& key = kv[0];
    if (std::find(std::begin(kRdzvConfKeys), std::end(kRdzvConfKeys), key) ==
        std::end(kRdzvConfKeys)) {
      return Bad(absl::StrCat("--rdzv-conf: unknown key '", key,
                              "' (known: ", absl::StrJoin(kRdzvConfKeys, ", "), ")"));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return Bad(absl::StrCat("--rdzv-conf: key '", key, "' is given twice"));
    }
    seen.push_back(key);
    if (key == "is_host") {
      // The spellings torch's RendezvousParameters.get_as_bool accepts, in any case.
      const std::string v = absl::AsciiStrToLower(kv[1]);
      if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") {
        o->rdzv_is_host = true;
      } else if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") {
        o->rdzv_is_host = false;
      } else {
        return Bad(absl::StrCat(
            "--rdzv-conf is_host must be true or false (1/0, t/f, yes/no, y/n; any case), got '",
            kv[1], "'"));
      }
      continue;
    }
    if (key == "keep_alive_max_attempt") {
      auto attempts = ParseInt64("--rdzv-conf keep_alive_max_attempt", kv[1], 1, kInt64Max);
      if (!attempts.ok()) return attempts.status();
      continue;  // Accepted for compatibility: gRPC keepalive detects lost agents.
    }
    auto d = ParseDuration(absl::StrCat("--rdzv-conf ", key), kv[1], kMinPositiveFlagDuration,
                           kMaxFlagDuration);
    if (!d.ok()) return d.status();
    if (key == "join_timeout") conf->join_timeout = *d;
    if (key == "timeout") conf->timeout = *d;
    if (key == "last_call_timeout") o->last_call_timeout_s = absl::ToDoubleSeconds(*d);
    if (key == "read_timeout") o->reconnect_timeout_s = absl::ToDoubleSeconds(*d);
    // close_timeout, keep_alive_interval: accepted for compatibility.
  }
  return absl::OkStatus();
}

absl::StatusOr<std::set<int>> ParseRankList(const std::string& text) {
  std::set<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int r = 0;
    if (!absl::SimpleAtoi(item, &r) || r < 0) {
      return Bad(
          absl::StrCat("--local-ranks-filter must be local ranks like 0,2, got '", text, "'"));
    }
    out.insert(r);
  }
  return out;
}

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
  std::string join_timeout = "600";
  std::string connect_timeout = "30";
  std::string stop_timeout = "30";
  std::string shutdown_timeout;  // --shutdown-timeout: torchrun 2.13's name of --stop-timeout.
  std::string numa_binding;      // Empty: not given.
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  std::string monitor_interval = "0.1";
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
  bool stop_timeout_set = false;
  bool shutdown_timeout_set = false;
  bool duplicate_stdout_set = false;
  bool duplicate_stderr_set = false;
};

// Parses the numeric flags (all but --nnodes and --nproc-per-node) into `o`.
absl::Status ParseNumbers(const RawFlags& raw, LaunchOptions* o) {
  for (const auto& [flag, text, min, target] :
       {std::tuple<const char*, const std::string&, absl::Duration, double*>{
            "--rdzv-connect-timeout", raw.connect_timeout, kMinPositiveFlagDuration,
            &o->connect_timeout_s},
        {"--monitor-interval", raw.monitor_interval, absl::ZeroDuration(),
         &o->monitor_interval_s}}) {
    auto d = ParseDuration(flag, text, min, kMaxFlagDuration);
    if (!d.ok()) return d.status();
    *target = absl::ToDoubleSeconds(*d);
  }
  for (const auto& [flag, text, min, max, target] :
       {std::tuple<const char*, const std::string&, int64_t, int64_t, int*>{
            "--max-restarts", raw.max_restarts, 0, kMaxCount, &o->max_restarts},
        {"--standby-workers", raw.standby_workers, 0, kMaxCount, &o->standby_workers},
        {"--node-rank", raw.node_rank, 0, kMaxCount - 1, &o->node_rank},
        {"--master-port", raw.master_port, 1, 65535, &o->master_port},
        {"--worker-count", raw.worker_count, 0, kMaxCount, &o->worker_count},
        {"--parameter-server-count", raw.parameter_server_count, 0, kMaxCount,
         &o->parameter_server_count}}) {
    if (text.empty()) continue;  // Not given: keep the default.
    auto n = ParseInt64(flag, text, min, max);
    if (!n.ok()) return n.status();
    *target = static_cast<int>(*n);
  }
  o->master_port_set = !raw.master_port.empty();
  return absl::OkStatus();
}

// --join-timeout, --rdzv-conf join_timeout and --rdzv-conf timeout set one value: any two given
// must agree. Records which one set it, for the message when the join times out.
absl::Status ResolveJoinTimeout(const RawFlags& raw, const RdzvConfTimeouts& conf,
                                LaunchOptions* o) {
  std::vector<std::pair<std::string, absl::Duration>> given;
  auto flag =
      ParseDuration("--join-timeout", raw.join_timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
  if (!flag.ok()) return flag.status();
  if (raw.join_timeout_set) given.emplace_back("--join-timeout", *flag);
  if (conf.join_timeout) given.emplace_back("--rdzv-conf join_timeout", *conf.join_timeout);
  if (conf.timeout) given.emplace_back("--rdzv-conf timeout", *conf.timeout);
  for (size_t i = 1; i < given.size(); ++i) {
    if (given[i].second != given[0].second) {
      return Bad(absl::StrCat(given[0].first, "=", FormatFlagSeconds(given[0].second), " and ",
                              given[i].first, "=", FormatFlagSeconds(given[i].second),
                              " disagree: both set the join timeout; give one"));
    }
  }
  o->join_timeout_s = absl::ToDoubleSeconds(given.empty() ? *flag : given[0].second);
  if (!given.empty()) o->join_timeout_flag = given[0].first;
  return absl::OkStatus();
}

// "--nnodes=1 and --instance-count=2 disagree ...": an alias pair given with different values.
absl::Status Disagree(absl::string_view flag, absl::string_view value, absl::string_view alias,
                      absl::string_view alias_value) {
  return Bad(absl::StrCat(flag, "=", value, " and ", alias, "=", alias_value, " disagree: ", alias,
                          " is an alias of ", flag, "; give one"));
}

// --stop-timeout, its torchrun 2.13 alias --shutdown-timeout, and torchrun's
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT (read only when neither flag is given) set one value.
absl::Status ResolveStopTimeout(const RawFlags& raw, const char* (*getenv_fn)(const char*),
                                LaunchOptions* o) {
  auto parse = [](const char* flag, const std::string& text) {
    return ParseDuration(flag, text, absl::ZeroDuration(), kMaxFlagDuration);
  };
  auto stop = parse("--stop-timeout", raw.stop_timeout);
  if (!stop.ok()) return stop.status();
  if (raw.shutdown_timeout_set) {
    auto shutdown = parse("--shutdown-timeout", raw.shutdown_timeout);
    if (!shutdown.ok()) return shutdown.status();
    if (raw.stop_timeout_set && *stop != *shutdown) {
      return Disagree("--stop-timeout", raw.stop_timeout, "--shutdown-timeout",
                      raw.shutdown_timeout);
    }
    stop = shutdown;
  } else if (const char* env = getenv_fn("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
             !raw.stop_timeout_set && env != nullptr && *env != '\0') {
    stop = parse("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", env);
    if (!stop.ok()) return stop.status();
  }
  o->stop_timeout_s = absl::ToDoubleSeconds(*stop);
  return absl::OkStatus();
}

// --numa-binding: torchrun 2.13 wraps each worker in numactl bound to the CPUs near its GPU.
// dgt-run does not bind workers (it would need each CUDA device's PCI address, which only the
// CUDA runtime knows for sure): a valid mode is refused with the reason, never ignored.
absl::Status CheckNumaBinding(const std::string& mode) {
  if (std::find_if(std::begin(kNumaBindingModes), std::end(kNumaBindingModes),
                   [&](const char* m) { return mode == m; }) == std::end(kNumaBindingModes)) {
    return Bad(absl::StrCat("--numa-binding must be one of ",
                            absl::StrJoin(kNumaBindingModes, ", "), " (as torchrun 2.13), got '",
                            mode, "'"));
  }
  return Bad(absl::StrCat(
      "--numa-binding=", mode,
      " is not supported on this host: dgt-run does not bind workers to NUMA nodes (torchrun "
      "2.13 runs each worker under numactl); start the script through numactl yourself "
      "(--no-python with a wrapper), or leave the flag out"));
}

absl::Status Validate(const RawFlags& raw, const std::vector<std::string>& rest_in,
                      const char* (*getenv_fn)(const char*), LaunchOptions* o) {
  if (raw.instance_count_set) {
    LaunchOptions alias;
    if (auto s = ParseNnodes(raw.instance_count, &alias); !s.ok()) {
      return Bad(absl::StrCat("--instance-count must be N or MIN:MAX with 0 < MIN <= MAX, got '",
                              raw.instance_count, "'"));
    }
    if (raw.nnodes_set) {
      if (auto s = ParseNnodes(raw.nnodes, o); !s.ok()) return s;
      if (o->min_nodes != alias.min_nodes || o->max_nodes != alias.max_nodes) {
        return Disagree("--nnodes", raw.nnodes, "--instance-count", raw.instance_count);
      }
    }
    o->min_nodes = alias.min_nodes;
    o->max_nodes = alias.max_nodes;
  } else if (auto s = ParseNnodes(raw.nnodes, o); !s.ok()) {
    return s;
  }
  const std::string& nnodes_text = raw.instance_count_set ? raw.instance_count : raw.nnodes;
  if (raw.process_count_set) {
    LaunchOptions alias;
    if (auto s = ParseNproc(raw.process_count, getenv_fn, &alias); !s.ok()) {
      // The same checks, naming the flag given.
      return Bad(
          absl::StrReplaceAll(s.message(), {{"--nproc-per-node", "--process-count-per-instance"}}));
    }
    if (raw.nproc_set) {
      if (auto s = ParseNproc(raw.nproc, getenv_fn, o); !s.ok()) return s;
      if (o->nproc_per_node != alias.nproc_per_node) {
        return Disagree("--nproc-per-node", raw.nproc, "--process-count-per-instance",
                        raw.process_count);
      }
    }
    o->nproc_per_node = alias.nproc_per_node;
  } else if (auto s = ParseNproc(raw.nproc, getenv_fn, o); !s.ok()) {
    return s;
  }
  // Global ranks are ints (RANK, WORLD_SIZE): the largest world must fit one.
  const int64_t world = int64_t{o->max_nodes} * o->nproc_per_node;
  if (world > std::numeric_limits<int32_t>::max()) {
    return Bad(absl::StrCat("--nnodes=", nnodes_text, " with --nproc-per-node=", o->nproc_per_node,
                            " makes ", world, " ranks, more than ",
                            std::numeric_limits<int32_t>::max()));
  }
  RdzvConfTimeouts conf;
  if (auto s = ParseRdzvConf(raw.rdzv_conf, o, &conf); !s.ok()) return s;
  if (auto s = ResolveJoinTimeout(raw, conf, o); !s.ok()) return s;
  if (auto s = ParseNumbers(raw, o); !s.ok()) return s;
  if (auto s = ResolveStopTimeout(raw, getenv_fn, o); !s.ok()) return s;
  if (auto s = ValidateRunId(o->run_id); !s.ok()) return s;
  auto redirects = ParseStreamSpec(raw.redirects, "--redirects");
  if (!redirects.ok()) return redirects.status();
  o->redirects = *redirects;
  auto tee = ParseStreamSpec(raw.tee, "--tee");
  if (!tee.ok()) return tee.status();
  o->tee = *tee;
  auto filter = ParseRankList(raw.local_ranks_filter);
  if (!filter.ok()) return filter.status();
  o->local_ranks_filter = *filter;
  auto signals = ParseSignalList(raw.signals);
  if (!signals.ok()) return signals.status();
  o->signals_to_handle = *signals;
  o->signals_to_handle_text = raw.signals;
  if (raw.duplicate_stdout_set) {
    o->duplicate_stdout_filters = SplitDuplicateFilters(raw.duplicate_stdout_filters);
  }
  if (raw.duplicate_stderr_set) {
    o->duplicate_stderr_filters = SplitDuplicateFilters(raw.duplicate_stderr_filters);
  }
  if (std::find_if(std::begin(kEventLogHandlers), std::end(kEventLogHandlers), [&](const char* h) {
        return o->event_log_handler == h;
      }) == std::end(kEventLogHandlers)) {
    return Bad(
        absl::StrCat("--event-log-handler must be one of ", absl::StrJoin(kEventLogHandlers, ", "),
                     " (the handlers torchrun 2.13 registers), got '", o->event_log_handler, "'"));
  }
  if (!raw.numa_binding.empty()) {
    if (auto s = CheckNumaBinding(raw.numa_binding); !s.ok()) return s;
  }

  if (raw.log_format == "text") {
    o->log_format = LogFormat::kText;
  } else if (raw.log_format == "json") {
    o->log_format = LogFormat::kJson;
  } else {
    return Bad(absl::StrCat("--log-format must be text or json, got '", raw.log_format, "'"));
  }
  if (raw.distribution == "pytorch") {
    o->distribution = Distribution::kPytorch;
  } else if (raw.distribution == "tensorflow") {
    o->distribution = Distribution::kTensorflow;
  } else if (raw.distribution == "mpi") {
    o->distribution = Distribution::kMpi;
  } else {
    return Bad(absl::StrCat("--distribution must be pytorch, tensorflow or mpi, got '",
                            raw.distribution, "'"));
  }
  if (raw.restart_policy == "group") {
    o->restart_policy = RestartPolicy::kGroup;
  } else if (raw.restart_policy == "rank") {
    o->restart_policy = RestartPolicy::kRank;
  } else {
    return Bad(
        absl::StrCat("--restart-policy must be group or rank, got '", raw.restart_policy, "'"));
  }
  if (raw.recovery_mode == "replace") {
    o->recovery_mode = RecoveryMode::kReplace;
  } else if (raw.recovery_mode == "shrink") {
    o->recovery_mode = RecoveryMode::kShrink;
    if (o->restart_policy != RestartPolicy::kRank) {
      return Bad("--recovery-mode=shrink needs --restart-policy=rank");
    }
  } else {
    return Bad(
        absl::StrCat("--recovery-mode must be replace or shrink, got '", raw.recovery_mode, "'"));
  }
  if (o->standby_workers > 0 &&
      (o->restart_policy != RestartPolicy::kRank || o->recovery_mode != RecoveryMode::kReplace)) {
    return Bad(absl::StrCat("--standby-workers=", o->standby_workers,
                            " needs --restart-policy=rank and --recovery-mode=replace (standbys "
                            "replace failed ranks)"));
  }

  const std::string& backend = o->rdzv_backend;
  if (backend == "etcd" || backend == "etcd-v2") {
    return Bad(absl::StrCat("--rdzv-backend=", backend,
                            " is not supported: run dgt-rendezvous and pass its address with "
                            "--rdzv-endpoint"));
  }
  if (backend != "static" && backend != "c10d" && backend != "dgt") {
    return Bad(absl::StrCat("--rdzv-backend must be static, c10d or dgt, got '", backend, "'"));
  }
  if (o->start_method != "spawn" && o->start_method != "fork" && o->start_method != "forkserver") {
    return Bad(absl::StrCat("--start-method must be spawn, fork or forkserver, got '",
                            o->start_method, "'"));
  }
  if (o->min_nodes < o->max_nodes && o->join_timeout_s < o->last_call_timeout_s) {
    // The round waits last_call_timeout for more nodes once MIN joined; a shorter join timeout
    // fails every round that does not reach MAX.
    return Bad(absl::StrCat(
        o->join_timeout_flag, "=", o->join_timeout_s,
        " is shorter than --rdzv-conf last_call_timeout=", o->last_call_timeout_s,
        ": with --nnodes=", nnodes_text, " the round waits that long for more nodes once ",
        o->min_nodes, " joined, so it would time out; raise the one or lower the other"));
  }
  if (o->standalone) {
    if (o->max_nodes != 1) {
      return Bad(absl::StrCat("--standalone runs a single node, but --nnodes=", nnodes_text));
    }
    if (!o->rdzv_endpoint.empty()) {
      return Bad("--standalone embeds its own rendezvous; do not pass --rdzv-endpoint");
    }
  }
  if (!o->local_addr.empty()) {
    // Other nodes connect to this address: one this host does not own fails them much later.
    auto ip = ResolveToIp(o->local_addr);
    if (!ip.ok()) return Bad(absl::StrCat("--local-addr: ", ip.status().message()));
    if (auto s = CheckLocalAddress(*ip); !s.ok()) {
      return Bad(absl::StrCat("--local-addr=", o->local_addr, ": ", s.message()));
    }
  }
  // A file that is not PEM (or not the pair) otherwise fails every TLS handshake, which reads
  // as "cannot reach the rendezvous service" after the whole connect timeout.
  if (auto s = rendezvous::CheckClientTlsFiles({o->rdzv_tls_cert, o->rdzv_tls_key, o->rdzv_tls_ca});
      !s.ok()) {
    return s;
  }
  if (!o->rdzv_endpoint.empty()) {
    auto hp = ParseHostPortOrFree(o->rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!hp.ok()) return hp.status();
    if (hp->port == 0 && o->max_nodes > 1) {
      // torchrun 2.x: port 0 picks a free port, which other nodes cannot know.
      return Bad(absl::StrCat("--rdzv-endpoint=", o->rdzv_endpoint,
                              ": port 0 (a free port) is for a single node, but --nnodes=",
                              nnodes_text, "; give the port every node connects to"));
    }
  } else if (o->max_nodes > 1) {
    if (backend == "static") {
      // torchrun's static backend: node rank 0's agent hosts the store at --master-addr:
      // --master-port; every node knows its --node-rank.
      if (o->min_nodes != o->max_nodes) {
        return Bad(absl::StrCat("--rdzv-backend=static needs a fixed --nnodes, got '", nnodes_text,
                                "' (use --rdzv-endpoint of dgt-rendezvous for elastic jobs)"));
      }
      if (o->node_rank >= o->max_nodes) {
        return Bad(absl::StrCat("--node-rank must be 0..", o->max_nodes - 1,
                                " for --nnodes=", nnodes_text, ", got ", o->node_rank));
      }
      if (!raw.master_addr_set) {
        // The default 127.0.0.1 would make every node its own rank 0 with a world of one.
        return Bad(absl::StrCat("--nnodes=", nnodes_text,
                                " with --rdzv-backend=static needs --master-addr (the address of "
                                "node rank 0, reachable from every node), or --rdzv-endpoint of "
                                "dgt-rendezvous"));
      }
      if (!o->master_port_set) o->master_port = 29500;
      if (o->max_restarts > 0 && o->restart_policy != RestartPolicy::kRank) {
        // A group restart is a new round for every node, which needs the rendezvous service;
        // failing only at the first failure would waste the job's start. A rank restart stays
        // on its node and works here.
        return Bad(absl::StrCat(
            "--max-restarts=", o->max_restarts,
            " with --restart-policy=group needs a rendezvous "
            "service: the static form (--rdzv-backend=static, --nnodes=",
            nnodes_text,
            " without --rdzv-endpoint) cannot restart several nodes together; use --rdzv-endpoint "
            "of dgt-rendezvous, or --restart-policy=rank, or --max-restarts=0"));
      }
    } else {
      return Bad(absl::StrCat("--rdzv-endpoint is required for --nnodes=", nnodes_text,
                              " (or use --standalone for one node)"));
    }
  }
  if (o->distribution == Distribution::kTensorflow) {
    // The roles and --worker-count count the processes of the whole job, as Azure ML's
    // TensorFlow distribution does (ps, then the chief, then the workers, by global rank).
    const int roles = o->parameter_server_count + (o->tf_chief ? 1 : 0);
    const std::string counts = absl::StrCat(
        "--worker-count=", o->worker_count,
        " + --parameter-server-count=", o->parameter_server_count, o->tf_chief ? " + 1 chief" : "");
    if (o->worker_count > 0) {
      if (o->min_nodes != o->max_nodes) {
        return Bad(
            absl::StrCat("--worker-count needs a fixed --nnodes (the job's process count), "
                         "got --nnodes=",
                         nnodes_text));
      }
      const int total = o->worker_count + roles;
      if (!raw.nproc_set && !raw.process_count_set) {
        if (total % o->max_nodes != 0) {
          return Bad(
              absl::StrCat(counts, " = ", total,
                           " processes cannot be spread evenly over --nnodes=", o->max_nodes));
        }
        o->nproc_per_node = total / o->max_nodes;
      }
      const int64_t processes = static_cast<int64_t>(o->nproc_per_node) * o->max_nodes;
      if (total != processes) {
        return Bad(absl::StrCat(counts, " must equal the number of processes, ", processes,
                                o->max_nodes > 1
                                    ? absl::StrCat(" (--nnodes=", o->max_nodes,
                                                   " x --nproc-per-node=", o->nproc_per_node, ")")
                                    : ""));
      }
    }
    // The smallest world of the job (elastic: --nnodes MIN) must keep a worker.
    const int64_t smallest = static_cast<int64_t>(o->nproc_per_node) * o->min_nodes;
    if (roles >= smallest) {
      return Bad(absl::StrCat("--distribution tensorflow needs at least one worker: ", smallest,
                              " process(es)", o->min_nodes > 1 ? " (at the fewest nodes)" : "",
                              " for ", roles, " parameter server(s)/chief"));
    }
  }
  // "--" ends the flags, as in torchrun's argparse: what follows is the script, even "-x.py".
  const bool dashdash = !rest_in.empty() && rest_in[0] == "--";
  const std::vector<std::string> rest(rest_in.begin() + (dashdash ? 1 : 0), rest_in.end());
  if (rest.empty())
    return Bad(
        "missing the training script (usage: dgt-run [flags] [--] script.py "
        "[script args])");
  if (!dashdash && rest[0].size() > 1 && rest[0][0] == '-') {
    return Bad(absl::StrCat("unknown flag '", rest[0], "' (see dgt-run --help)"));
  }
  o->command = rest;
  // torchrun's argparse (2.13 on Python 3.11) also drops a first "--" right after the script:
  // "train.py -- a" gives the script ['a'], "train.py a -- b" ['a', '--', 'b'].
  if (!dashdash && o->command.size() > 1 && o->command[1] == "--") {
    o->command.erase(o->command.begin() + 1);
  }
  if (o->module && o->no_python) return Bad("-m/--module and --no-python exclude each other");
  if (o->run_path && (o->module || o->no_python)) {
    return Bad("--run-path excludes -m/--module and --no-python");
  }
  if (o->virtual_local_rank) {
    // torchrun 2.13 fails a worker whose local rank has no entry in CUDA_VISIBLE_DEVICES when it
    // starts; here before anything starts.
    if (const char* visible = getenv_fn("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
      const size_t entries = std::vector<absl::string_view>(absl::StrSplit(visible, ',')).size();
      if (static_cast<size_t>(o->nproc_per_node) > entries) {
        return Bad(absl::StrCat("--virtual-local-rank: local rank ", entries,
                                " has no device in CUDA_VISIBLE_DEVICES='", visible,
                                "' (--nproc-per-node=", o->nproc_per_node, ")"));
      }
    }
  }
  if (!o->no_python && !o->module) {
    // "dgt-run -- -- train.py a": torchrun 2.13's argparse takes the second "--" for the script
    // and runs "python -u -- train.py a", where "--" ends Python's own flags: train.py runs with
    // ['a']. The same argv here; the file checked is the one Python opens.
    const bool python_dashdash = !o->run_path && o->command.size() > 1 && o->command[0] == "--";
    const std::string& script = o->command[python_dashdash ? 1 : 0];
    std::error_code ec;
    if (std::filesystem::is_directory(script, ec)) {
      return Bad(absl::StrCat("training script '", script, "' is a directory"));
    }
    if (!std::filesystem::is_regular_file(script, ec)) {
      return absl::NotFoundError(absl::StrCat("training script '", script, "' does not exist"));
    }
  }
  if (const char* py = getenv_fn("DGT_PYTHON"); py != nullptr && *py != '\0') o->python = py;
  // torchrun's interpreter override wins: it is what a torchrun user sets for this launch.
  if (const char* py = getenv_fn("PYTHON_EXEC"); py != nullptr && *py != '\0') o->python = py;
  if (const char* t = getenv_fn("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); t != nullptr) {
    o->log_line_prefix_template = t;
  }
  return absl::OkStatus();
}

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

}  // namespace

int StreamSpec::For(int local_rank) const {
  auto it = per_rank.find(local_rank);
  return it != per_rank.end() ? it->second : (per_rank.empty() ? all : 0);
}

absl::StatusOr<StreamSpec> ParseStreamSpec(absl::string_view text, absl::string_view flag) {
  StreamSpec spec;
  auto error = [&] {
    return Bad(absl::StrCat(flag, " must be 0..3 or LOCAL_RANK:0..3,..., got '", text, "'"));
  };
  int v = 0;
  if (absl::SimpleAtoi(text, &v)) {
    if (v < 0 || v > 3) return error();
    spec.all = v;
    return spec;
  }
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || rank < 0 ||
        !absl::SimpleAtoi(kv[1], &v) || v < 0 || v > 3) {
      return error();
    }
    spec.per_rank[rank] = v;
  }
  if (spec.per_rank.empty()) return error();
  return spec;
}

std::vector<std::string> SplitDuplicateFilters(absl::string_view text) {
  // ",," is a comma; '\0' cannot be in an argument, so it stands for one while splitting.
  const std::string escaped = absl::StrReplaceAll(text, {{",,", std::string(1, '\0')}});
  std::vector<std::string> out = absl::StrSplit(escaped, ',');
  for (std::string& item : out) std::replace(item.begin(), item.end(), '\0', ',');
  return out;
}

absl::StatusOr<std::vector<int>> ParseSignalList(absl::string_view text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::string name(absl::StripAsciiWhitespace(item));
    int number = 0;
    if (absl::SimpleAtoi(name, &number)) {
      if (number < 1 || number >= NSIG) number = 0;
    } else {
      std::string bare = absl::StartsWith(name, "SIG") ? name.substr(3) : name;
      for (int s = 1; s < NSIG; ++s) {
        const char* abbrev = sigabbrev_np(s);
        if (abbrev != nullptr && bare == abbrev) number = s;
      }
    }
    if (number == 0 || number == SIGKILL || number == SIGSTOP) {
      return Bad(absl::StrCat("--signals-to-handle: '", name,
                              "' is not a signal that can be "
                              "handled"));
    }
    out.push_back(number);
  }
  return out;
}

ParsedCommandLine ParseDgtRunCommandLine(const std::vector<std::string>& args,
                                         const char* (*getenv_fn)(const char*)) {
  if (getenv_fn == nullptr) getenv_fn = RealGetenv;
  LaunchOptions o;
  RawFlags raw;

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
      "Rendezvous service HOST[:PORT] (default port 29400; IPv6 as [addr]:port)", kRdzv);
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
  add("--node-rank,--node_rank", raw.node_rank,
      "Rank of this node with --rdzv-backend=static and --nnodes>1 (default 0)", kStatic)
      ->type_name("INT");
  CLI::Option* master_addr_opt = add(
      "--master-addr,--master_addr", o.master_addr,
      "Node rank 0's address: it hosts the store there (static; required for --nnodes>1)", kStatic);
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
  add("--signals-to-handle,--signals_to_handle", raw.signals,
      "Signals forwarded to the workers; listed SIGUSR1/SIGUSR2 do not stop the job", kSupervision);
  add("--monitor-interval,--monitor_interval", raw.monitor_interval,
      "Accepted; worker exits are events, not polled", kSupervision)
      ->type_name("SECONDS");
  add("--start-method,--start_method", o.start_method,
      "spawn, fork or forkserver: accepted; workers are fork/exec'ed", kSupervision);

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
  try {
    app.parse(reversed);
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
      if (opt->count() == 0 && !alias_given && value != nullptr && *value != '\0') {
        opt->add_result(std::string(value));
        opt->run_callback();
      }
    }
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
  s = Validate(raw, app.remaining(), getenv_fn, &o);
  if (!s.ok()) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", s.message(), "\n");
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace dgt::agent
