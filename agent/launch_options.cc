#include "agent/launch_options.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/host_port.h"

namespace dgt::agent {
namespace {

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
    return Bad(absl::StrCat("--nnodes must be N or MIN:MAX with 0 < MIN <= MAX, got '", text,
                            "'"));
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
      return Bad(absl::StrCat("--nproc-per-node must be an integer, auto, cpu or gpu, got '",
                              text, "'"));
    }
    if (n < 1) return Bad(absl::StrCat("--nproc-per-node must be >= 1, got ", n));
    o->nproc_per_node = n;
  }
  return absl::OkStatus();
}

// --rdzv-conf "k=v,k=v" (torchrun keys). Timeouts are seconds.
absl::Status ParseRdzvConf(const std::string& text, LaunchOptions* o) {
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Bad(absl::StrCat("--rdzv-conf entries must be key=value, got '", item, "'"));
    }
    double seconds = 0;
    bool is_timeout = kv[0].size() > 8 && kv[0].substr(kv[0].size() - 8) == "_timeout";
    if (is_timeout && (!absl::SimpleAtod(kv[1], &seconds) || seconds <= 0)) {
      return Bad(absl::StrCat("--rdzv-conf ", kv[0], " must be a number of seconds > 0, got '",
                              kv[1], "'"));
    }
    if (kv[0] == "join_timeout") o->join_timeout_s = seconds;
    if (kv[0] == "last_call_timeout") o->last_call_timeout_s = seconds;
    // close_timeout, read_timeout, timeout, is_host, keep_alive_*: accepted for compatibility.
  }
  return absl::OkStatus();
}

absl::Status Validate(const std::string& nnodes, const std::string& nproc,
                      const std::string& rdzv_backend, const std::string& rdzv_conf,
                      const std::vector<std::string>& rest,
                      const char* (*getenv_fn)(const char*), LaunchOptions* o) {
  if (auto s = ParseNnodes(nnodes, o); !s.ok()) return s;
  if (auto s = ParseNproc(nproc, getenv_fn, o); !s.ok()) return s;
  if (auto s = ParseRdzvConf(rdzv_conf, o); !s.ok()) return s;
  if (rdzv_backend == "etcd" || rdzv_backend == "etcd-v2") {
    return Bad(absl::StrCat("--rdzv-backend=", rdzv_backend,
                            " is not supported: run dgt-rendezvous and pass its address with "
                            "--rdzv-endpoint"));
  }
  if (rdzv_backend != "static" && rdzv_backend != "c10d" && rdzv_backend != "dgt") {
    return Bad(absl::StrCat("--rdzv-backend must be static, c10d or dgt, got '", rdzv_backend,
                            "'"));
  }
  if (o->max_restarts < 0) {
    return Bad(absl::StrCat("--max-restarts must be >= 0, got ", o->max_restarts));
  }
  if (o->join_timeout_s <= 0 || o->connect_timeout_s <= 0 || o->stop_timeout_s < 0) {
    return Bad("timeouts must be positive numbers of seconds");
  }
  if (o->standalone) {
    if (o->max_nodes != 1) {
      return Bad(absl::StrCat("--standalone runs a single node, but --nnodes=", nnodes));
    }
    if (!o->rdzv_endpoint.empty()) {
      return Bad("--standalone embeds its own rendezvous; do not pass --rdzv-endpoint");
    }
  }
  if (!o->rdzv_endpoint.empty()) {
    auto hp = ParseHostPort(o->rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!hp.ok()) return hp.status();
  } else if (o->max_nodes > 1) {
    return Bad(absl::StrCat("--rdzv-endpoint is required for --nnodes=", nnodes,
                            " (or use --standalone for one node)"));
  }
  if (rest.empty()) return Bad("missing the training script (usage: dgt-run [flags] script.py "
                               "[script args])");
  if (rest[0].size() > 1 && rest[0][0] == '-') {
    return Bad(absl::StrCat("unknown flag '", rest[0], "' (see dgt-run --help)"));
  }
  o->command = rest;
  if (!o->no_python && !o->module) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o->command[0], ec)) {
      return absl::NotFoundError(
          absl::StrCat("training script '", o->command[0], "' does not exist"));
    }
  }
  if (const char* py = getenv_fn("DGT_PYTHON"); py != nullptr && *py != '\0') o->python = py;
  return absl::OkStatus();
}

const char* RealGetenv(const char* name) { return std::getenv(name); }

}  // namespace

ParsedCommandLine ParseDgtRunCommandLine(const std::vector<std::string>& args,
                                         const char* (*getenv_fn)(const char*)) {
  if (getenv_fn == nullptr) getenv_fn = RealGetenv;
  LaunchOptions o;
  std::string nnodes = "1";
  std::string nproc = "1";
  std::string rdzv_backend = "c10d";
  std::string rdzv_conf;

  CLI::App app{
      "dgt-run: launch a distributed PyTorch training job (torchrun-compatible).\n"
      "Usage: dgt-run [flags] script.py [script args]",
      "dgt-run"};
  app.prefix_command();
  app.get_formatter()->column_width(40);
  app.add_option("--nnodes", nnodes, "Number of nodes: N or MIN:MAX")->capture_default_str();
  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "Workers per node: N, auto, cpu or gpu")
      ->capture_default_str();
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                 "Rendezvous service HOST[:PORT] (default port 29400; IPv6 as [addr]:port)");
  app.add_option("--rdzv-id,--rdzv_id", o.run_id, "Run id shared by every node of the job")
      ->capture_default_str();
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "c10d or static: both use dgt's rendezvous")
      ->capture_default_str();
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "key=value,...: join_timeout, last_call_timeout (seconds)");
  app.add_flag("--standalone", o.standalone,
               "Single node; rendezvous and store embedded on free ports");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restarts of the worker group on failure")
      ->capture_default_str();
  app.add_flag("--no-python,--no_python", o.no_python,
               "Run the command directly instead of with python -u");
  app.add_flag("-m,--module", o.module, "Run the script as a Python module (python -m)");
  app.add_option("--local-addr,--local_addr", o.local_addr,
                 "IP (or name, resolved here) other nodes reach this node at");
  app.add_option("--node-id,--node_id", o.node_id, "Node identity (default hostname:pid)");
  app.add_option("--join-timeout,--join_timeout", o.join_timeout_s,
                 "Seconds to wait for the round to close")
      ->capture_default_str();
  app.add_option("--rdzv-connect-timeout,--rdzv_connect_timeout", o.connect_timeout_s,
                 "Seconds to keep trying to reach the rendezvous endpoint")
      ->capture_default_str();
  app.add_option("--stop-timeout,--stop_timeout", o.stop_timeout_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  app.set_version_flag("--version", "dgt-run 0.1.0");

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ParsedCommandLine result;
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    result.output = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.output = "dgt-run 0.1.0\n";
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", e.what(), "\n");
    return result;
  }
  absl::Status s = Validate(nnodes, nproc, rdzv_backend, rdzv_conf, app.remaining(), getenv_fn, &o);
  if (!s.ok()) {
    result.exit_code = 2;
    result.output = absl::StrCat("dgt-run: error: ", s.message(), "\n");
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace dgt::agent
