// One flag's text to its value: the parsers of agent/flags/launch_options.h and
// agent/flags/launch_options_internal.h (the latter used by Validate in launch_options_checks.cc).
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "agent/flags/launch_options.h"
#include "agent/flags/launch_options_internal.h"
#include "common/flag_parse.h"

namespace dgt::agent {
namespace launch_internal {
namespace {

// The most node ranks, workers per node, restarts or TensorFlow roles a flag accepts: far beyond
// any real job. The world (nodes times workers per node) is checked to fit an int on its own.
constexpr int64_t kMaxCount = 1000000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// The most workers one agent starts: beyond the largest nodes' cores and GPUs; more only fills
// pid_max and makes a stop signal wait for the spawning.
constexpr int kMaxNprocPerNode = 4096;
// The shortest --hang-timeout and --first-progress-timeout: the agent reads the progress slots
// every twentieth of the timeout (at least every 5 ms), and a step shorter than this is no job's.
constexpr absl::Duration kMinHangTimeout = absl::Milliseconds(100);

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

// --rdzv-conf keys torchrun's rendezvous handlers read (REFERENCE.md §2); anything else is a typo.
constexpr const char* kRdzvConfKeys[] = {
    "join_timeout", "last_call_timeout",   "close_timeout",          "read_timeout",
    "timeout",      "keep_alive_interval", "keep_alive_max_attempt", "is_host",
};

// --local-ranks-filter "0,2": the local ranks shown on the console; "" shows all. An empty item
// ("0,,1", "0,") is refused, as torchrun 2.13's int() of each item refuses it.
absl::StatusOr<std::set<int>> ParseRankList(const std::string& text) {
  std::set<int> out;
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int r = 0;
    if (!absl::SimpleAtoi(item, &r) || r < 0) {
      return Bad(
          absl::StrCat("--local-ranks-filter must be local ranks like 0,2, got '", text, "'"));
    }
    out.insert(r);
  }
  return out;
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

}  // namespace

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
  for (const auto& [flag, text, target] :
       {std::tuple<const char*, const std::string&, double*>{"--hang-timeout", raw.hang_timeout,
                                                             &o->hang_timeout_s},
        {"--first-progress-timeout", raw.first_progress_timeout, &o->first_progress_timeout_s}}) {
    auto d = ParseDuration(flag, text, absl::ZeroDuration(), kMaxFlagDuration);
    if (!d.ok()) return d.status();
    if (*d > absl::ZeroDuration() && *d < kMinHangTimeout) {
      return Bad(absl::StrCat(flag, " must be 0 (off) or at least ",
                              FormatFlagSeconds(kMinHangTimeout), " seconds, got '", text, "'"));
    }
    *target = absl::ToDoubleSeconds(*d);
  }
  // `given`: the flag (or its PET_* default) was given. --max-restarts and the others with a
  // text default are always parsed; --node-rank and --master-port have none.
  for (const auto& [flag, text, given, min, max, target] :
       {std::tuple<const char*, const std::string&, bool, int64_t, int64_t, int*>{
            "--max-restarts", raw.max_restarts, true, 0, kMaxCount, &o->max_restarts},
        // At most as many standbys as workers may run on a node (each is a worker's process).
        {"--standby-workers", raw.standby_workers, true, 0, kMaxNprocPerNode, &o->standby_workers},
        // The service's own bound (RoundStateOptions::max_waiting_nodes_per_run's default).
        {"--spare-nodes", raw.spare_nodes, true, 0, 1000, &o->spare_nodes},
        {"--node-rank", raw.node_rank, raw.node_rank_set, 0, kMaxCount - 1, &o->node_rank},
        {"--master-port", raw.master_port, raw.master_port_set, 1, 65535, &o->master_port},
        {"--worker-count", raw.worker_count, true, 0, kMaxCount, &o->worker_count},
        {"--parameter-server-count", raw.parameter_server_count, true, 0, kMaxCount,
         &o->parameter_server_count}}) {
    if (!given) continue;  // Not given: keep the default.
    // `--max-restarts ""`: refused as `--max-restarts=` is (torchrun's argparse: invalid int).
    if (text.empty()) return Bad(absl::StrCat(flag, " needs a value, got an empty one"));
    auto n = ParseInt64(flag, text, min, max);
    if (!n.ok()) return n.status();
    *target = static_cast<int>(*n);
  }
  o->master_port_set = raw.master_port_set;
  return absl::OkStatus();
}

absl::Status ParseStreamFlags(const RawFlags& raw, LaunchOptions* o) {
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
  return absl::OkStatus();
}

absl::Status ParseChoices(const RawFlags& raw, LaunchOptions* o) {
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
  if (raw.fork_server == "on") {
    o->fork_server = true;
  } else if (raw.fork_server == "off") {
    o->fork_server = false;
  } else {
    return Bad(absl::StrCat("--fork-server must be on or off, got '", raw.fork_server, "'"));
  }
  if (o->standby_workers > 0 &&
      (o->restart_policy != RestartPolicy::kRank || o->recovery_mode != RecoveryMode::kReplace)) {
    return Bad(absl::StrCat("--standby-workers=", o->standby_workers,
                            " needs --restart-policy=rank and --recovery-mode=replace (standbys "
                            "replace failed ranks)"));
  }
  return absl::OkStatus();
}

}  // namespace launch_internal

using launch_internal::Bad;

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

}  // namespace dgt::agent
