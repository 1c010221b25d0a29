// Validate (agent/flags/launch_options_internal.h): dgt-run's flags against each other, after each
// was parsed on its own (launch_options_values.cc). The order of the checks is the order of the
// errors a command line with several mistakes gets: node counts, the single flags, the
// rendezvous form, the TensorFlow roles, then the script.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "agent/flags/launch_options.h"
#include "agent/flags/launch_options_internal.h"
#include "agent/workers/log_dir.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "common/utf8.h"
#include "rendezvous/credentials.h"
#include "replica/endpoint_list.h"

namespace dgt::agent::launch_internal {
namespace {

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

// The --nnodes value as given (--instance-count's when that was given), for messages.
const std::string& NnodesText(const RawFlags& raw) {
  return raw.instance_count_set ? raw.instance_count : raw.nnodes;
}

// --nnodes and --nproc-per-node, each with its Azure ML alias (both given: they must agree), and
// the largest world they make.
absl::Status ResolveNodeCounts(const RawFlags& raw, const char* (*getenv_fn)(const char*),
                               LaunchOptions* o) {
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
  const std::string& nnodes_text = NnodesText(raw);
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
  return absl::OkStatus();
}

// The rendezvous form: --rdzv-backend, --start-method, the join timeout against
// last_call_timeout, --standalone, --local-addr, the TLS files, then --rdzv-endpoint or, without
// it, the static backend's --node-rank and --master-addr for more than one node.
absl::Status CheckRendezvous(const RawFlags& raw, LaunchOptions* o) {
  const std::string& nnodes_text = NnodesText(raw);
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
    if (absl::StrContains(o->rdzv_endpoint, ',')) {
      return Bad(absl::StrCat(
          "--standalone embeds its own rendezvous, but --rdzv-endpoint=", o->rdzv_endpoint,
          " names replicas of dgt-rendezvous; use one or the other"));
    }
    if (!o->rdzv_endpoint.empty()) {
      return Bad("--standalone embeds its own rendezvous; do not pass --rdzv-endpoint");
    }
    if (o->spare_nodes > 0) {
      // No other agent can reach the embedded rendezvous: no spare could ever join.
      return Bad(
          absl::StrCat("--standalone runs a single node, so no spare can join it, but "
                       "--spare-nodes=",
                       o->spare_nodes));
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
  if (absl::StrContains(o->rdzv_endpoint, ',')) {
    // Replicas of one dgt-rendezvous service (docs/RENDEZVOUS.md "Several replicas"), for every
    // --rdzv-backend, as one endpoint is; torchrun has no list form.
    auto list = replica::ParseEndpointList(o->rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!list.ok()) return list.status();
    if (list->size() > 1 && o->rdzv_is_host == true) {
      return Bad(
          absl::StrCat("--rdzv-conf is_host=1 hosts the rendezvous at one address, but "
                       "--rdzv-endpoint=",
                       o->rdzv_endpoint, " names ", list->size(),
                       " replicas of dgt-rendezvous; give one endpoint, or drop is_host"));
    }
  } else if (!o->rdzv_endpoint.empty()) {
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
  return absl::OkStatus();
}

// --distribution tensorflow: the roles and --worker-count against the job's processes; without
// --nproc-per-node, --worker-count sets it.
absl::Status CheckTensorflowRoles(const RawFlags& raw, LaunchOptions* o) {
  if (o->distribution != Distribution::kTensorflow) return absl::OkStatus();
  const std::string& nnodes_text = NnodesText(raw);
  // The roles and --worker-count count the processes of the whole job, as Azure ML's
  // TensorFlow distribution does (ps, then the chief, then the workers, by global rank).
  const int roles = o->parameter_server_count + (o->tf_chief ? 1 : 0);
  const std::string counts = absl::StrCat("--worker-count=", o->worker_count,
                                          " + --parameter-server-count=", o->parameter_server_count,
                                          o->tf_chief ? " + 1 chief" : "");
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
        return Bad(absl::StrCat(counts, " = ", total,
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
  return absl::OkStatus();
}

// --node-id is sent to the rendezvous service in a protobuf string field: text protobuf refuses
// (invalid UTF-8) would fail every join attempt until the join timeout, and a control character
// would split log lines. Empty: the default (hostname:pid) is chosen later.
absl::Status ValidateNodeId(absl::string_view node_id) {
  for (char c : node_id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Bad(absl::StrCat("--node-id must not contain control characters, got '",
                              absl::CHexEscape(node_id), "'"));
    }
  }
  if (const size_t at = FirstInvalidUtf8(node_id); at != absl::string_view::npos) {
    return Bad(absl::StrCat("--node-id must be UTF-8 text (byte ", at + 1, " is not), got '",
                            absl::CHexEscape(node_id), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

// Flags given that have no effect with the others, as warnings (torchrun 2.13 run.py warns of
// an unused --master-addr the same way; it ignores a --local_ranks_filter rank without a worker
// silently).
void NoteIgnoredFlags(const RawFlags& raw, LaunchOptions* o) {
  const bool static_form =
      o->rdzv_backend == "static" && o->rdzv_endpoint.empty() && !o->standalone && o->max_nodes > 1;
  if (raw.master_addr_set && !static_form) {
    // One node hosts its store on this host (MASTER_ADDR is its address; --master-port, when
    // given, is the store's port); several nodes with --rdzv-endpoint take node rank 0's address
    // from the rendezvous service.
    o->warnings.push_back(
        absl::StrCat("--master-addr=", o->master_addr,
                     " is ignored: it is used only with --rdzv-backend=static, --nnodes>1 and no "
                     "--rdzv-endpoint (",
                     o->max_nodes == 1 ? "one node hosts its store on this host"
                                       : "node rank 0's address comes from the rendezvous service",
                     ")"));
  }
  std::vector<std::string> missing;
  for (int r : o->local_ranks_filter) {
    if (r >= o->nproc_per_node) missing.push_back(absl::StrCat(r));
  }
  if (!missing.empty()) {
    o->warnings.push_back(absl::StrCat(
        "--local-ranks-filter=", raw.local_ranks_filter, ": no local rank ",
        absl::StrJoin(missing, ", "), " on this node (--nproc-per-node=", o->nproc_per_node,
        ", local ranks 0..", o->nproc_per_node - 1, "); ",
        missing.size() == o->local_ranks_filter.size() ? "no worker output reaches the console"
                                                       : "only the others are shown"));
  }
}

absl::Status Validate(const RawFlags& raw, const std::vector<std::string>& rest,
                      const char* (*getenv_fn)(const char*), LaunchOptions* o) {
  if (auto s = ResolveNodeCounts(raw, getenv_fn, o); !s.ok()) return s;
  RdzvConfTimeouts conf;
  if (auto s = ParseRdzvConf(raw.rdzv_conf, o, &conf); !s.ok()) return s;
  if (auto s = ResolveJoinTimeout(raw, conf, o); !s.ok()) return s;
  if (auto s = ParseNumbers(raw, o); !s.ok()) return s;
  if (auto s = ResolveStopTimeout(raw, getenv_fn, o); !s.ok()) return s;
  if (auto s = ValidateRunId(o->run_id); !s.ok()) return s;
  if (auto s = ValidateNodeId(o->node_id); !s.ok()) return s;
  if (auto s = ParseStreamFlags(raw, o); !s.ok()) return s;
  if (auto s = ParseChoices(raw, o); !s.ok()) return s;
  if (auto s = CheckRendezvous(raw, o); !s.ok()) return s;
  if (auto s = CheckTensorflowRoles(raw, o); !s.ok()) return s;
  if (auto s = ResolveCommand(rest, getenv_fn, o); !s.ok()) return s;
  NoteIgnoredFlags(raw, o);
  return absl::OkStatus();
}

}  // namespace dgt::agent::launch_internal
