#include "server/flags.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/version.h"
#include "rendezvous/credentials.h"
#include "replica/endpoint_list.h"

namespace dgt::server {
namespace {

// "host:port,host:port" (--etcd-endpoints): each a non-empty host and a port in 1..65535, each
// once.
absl::StatusOr<std::vector<std::string>> ParseEndpoints(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    // etcd's own flags take URLs; this client speaks plain gRPC to HOST:PORT only.
    if (absl::StrContains(part, "://")) {
      return absl::InvalidArgumentError(absl::StrCat("--etcd-endpoints: '", part,
                                                     "' is a URL; give HOST:PORT without a scheme "
                                                     "(in '",
                                                     text, "')"));
    }
    const size_t colon = part.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-endpoints: '", part, "' is not HOST:PORT (in '", text, "')"));
    }
    // A member listed twice would be asked twice per pass, and a typo for another member hides.
    if (absl::c_linear_search(out, part)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-endpoints: '", part, "' is listed twice in '", text, "'"));
    }
    out.emplace_back(part);
  }
  return out;
}

// Binds a throwaway socket to `text` ("HOST:PORT", the value of `flag`) and closes it, so that an
// address this host cannot serve on is reported in one line naming the flag and the value, before
// gRPC (whose own failure is a multi-line dump) or the metrics server tries it. Nothing listens:
// the real server binds the address right after.
// Errors: InvalidArgument (exit 2, as any bad flag value) when the value is malformed or the
// address is not this host's (EADDRNOTAVAIL); Unavailable (exit 1: a retry may pass) when the
// port is in use or the bind is refused for another reason (EACCES below port 1024, ...).
absl::Status ProbeBind(const char* flag, const std::string& text) {
  auto hp = ParseListenAddress(text, flag);
  if (!hp.ok()) return hp.status();
  auto ip = ResolveToIp(hp->host);
  if (!ip.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", ip.status().message()));
  }
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, ip->c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(hp->port);
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, ip->c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(hp->port);
    len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", text, "': not an IP address"));
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();  // No socket to probe with: let the server report.
  // As the servers do: a port whose old connections linger in TIME_WAIT is free.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  const int err = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  const std::string message =
      absl::StrCat(flag, " '", text, "': cannot listen there: ", std::strerror(err));
  if (err == EADDRNOTAVAIL) {
    return absl::InvalidArgumentError(
        absl::StrCat(message, " (not an address of this host; 0.0.0.0 or [::] for all)"));
  }
  if (err == EADDRINUSE) {
    return absl::UnavailableError(absl::StrCat(message, " (another process serves that port)"));
  }
  return absl::UnavailableError(message);
}

// Whether `host` (a host name, an IPv4 address, or an IPv6 address without brackets) is made of
// the characters such names have: letters, digits, '.', '-', '_', and ':' / '%' for IPv6.
bool IsHostName(const std::string& host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) == 0 && c != '.' && c != '-' &&
        c != '_' && c != ':' && c != '%') {
      return false;
    }
  }
  return true;
}

}  // namespace

int ExitCodeFor(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

void PrintError(const absl::Status& status) {
  std::fprintf(stderr, "dgt-rendezvous: error: %s\n", std::string(status.message()).c_str());
}

ParsedFlags ParseFlags(int argc, char** argv) {
  CLI::App app{"dgt-rendezvous: elastic rendezvous service for dgt agents", "dgt-rendezvous"};
  // A repeated flag takes its last value, as dgt-run's (torchrun's argparse).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ParsedFlags parsed;
  ServerOptions& server = parsed.options;
  rendezvous::RendezvousServerOptions& options = server.rendezvous;
  options.listen = "127.0.0.1:29400";
  // Numbers stay text until common/flag_parse.h checks them, with the same messages as dgt-run's
  // and dgt's flags.
  std::string last_call_timeout = "30";
  std::string join_timeout = "600";
  std::string keepalive_time_ms = absl::StrCat(options.keepalive.keepalive_time_ms);
  std::string keepalive_timeout_ms = absl::StrCat(options.keepalive.keepalive_timeout_ms);
  std::string max_sessions_per_peer = absl::StrCat(options.max_sessions_per_peer);
  std::string max_waiting_nodes = absl::StrCat(options.rounds.max_waiting_nodes_per_run);
  std::string token_file;
  std::string backend_name = "memory";
  std::string etcd_endpoints;
  std::string etcd_prefix = "/dgt/runs/";
  std::string replica_id;
  std::string advertise_address;
  std::string leader_lease_s = "2";
  std::string etcd_max_request_bytes = "1572864";
  // The jobs service (jobs/jobs_service.h, docs/JOBS.md).
  std::string submit_token_file;
  std::string etcd_jobs_prefix = "/dgt/jobs/";
  app.add_option("--listen", options.listen,
                 "HOST:PORT to serve on ([v6]:port for IPv6; port 0 = free)")
      ->capture_default_str();
  app.add_option("--last-call-timeout,--last_call_timeout", last_call_timeout,
                 "Default seconds to wait for more nodes once MIN joined")
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--join-timeout,--join_timeout", join_timeout,
                 "Default seconds a run may stay below MIN nodes after losing nodes")
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--keepalive-time-ms", keepalive_time_ms,
                 "gRPC keepalive ping interval (100 to 3600000)")
      ->type_name("INT")
      ->capture_default_str();
  app.add_option("--keepalive-timeout-ms", keepalive_timeout_ms,
                 "A peer silent this long after a ping is dead (100 to 3600000)")
      ->type_name("INT")
      ->capture_default_str();
  app.add_option("--tls-cert", options.tls.cert_file, "PEM server certificate (turns TLS on)");
  app.add_option("--tls-key", options.tls.key_file, "PEM server private key");
  app.add_option("--tls-client-ca", options.tls.ca_file,
                 "PEM CA for client certificates (mutual TLS)");
  app.add_option("--token-file", token_file, "File holding a bearer token every RPC must carry");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "HOST:PORT for Prometheus metrics over HTTP (GET /metrics)");
  app.add_option("--max-sessions-per-peer,--max_sessions_per_peer", max_sessions_per_peer,
                 "Open agent sessions allowed from one IP address (0 = no limit)")
      ->type_name("INT")
      ->capture_default_str();
  app.add_option("--max-waiting-nodes-per-run,--max_waiting_nodes_per_run", max_waiting_nodes,
                 "Nodes a run may hold beyond its MAX (waiting spares)")
      ->type_name("INT")
      ->capture_default_str();
  app.add_option("--backend", backend_name,
                 "Where run state lives: memory (this process) or etcd (--etcd-endpoints)")
      ->type_name("memory|etcd")
      ->capture_default_str();
  app.add_option("--etcd-endpoints", etcd_endpoints,
                 "etcd v3 members' client HOST:PORTs, comma-separated (--backend=etcd)")
      ->type_name("HOST:PORT,...");
  app.add_option("--etcd-prefix", etcd_prefix, "etcd key prefix of the runs (--backend=etcd)")
      ->capture_default_str();
  app.add_option("--replica-id", replica_id,
                 "This replica's name among the replicas on one --etcd-prefix (default "
                 "HOSTNAME:PORT; --backend=etcd)");
  app.add_option("--advertise-address", advertise_address,
                 "HOST:PORT agents reach this replica at, told by standbys (default: --listen; "
                 "--backend=etcd)");
  app.add_option("--leader-lease-s", leader_lease_s,
                 "TTL of the leader's etcd lease: a dead leader is replaced this long after its "
                 "last renewal (etcd 3.4's minimum is 2 with default etcd timing; --backend=etcd)")
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--submit-token-file", submit_token_file,
                 "File holding the token `dgt submit` / `dgt cancel` (and the job reads) must "
                 "carry; without it job submission is off");
  app.add_flag("--allow-unauthenticated-submit", server.jobs.allow_unauthenticated_submit,
               "Without --submit-token-file, accept jobs from anyone who reaches the port (tests, "
               "one-machine trials)");
  app.add_option("--advertise-endpoint", server.jobs.scheduler.rdzv_endpoint,
                 "HOST:PORT node daemons pass to dgt-run for a job (default: the bound --listen "
                 "address; the host name for 0.0.0.0 / [::])");
  app.add_option("--etcd-max-request-bytes", etcd_max_request_bytes,
                 "The most bytes of one etcd write: etcd's --max-request-bytes, as the members "
                 "run with (a run too large for one round's write is refused at its first join; "
                 "--backend=etcd)")
      ->type_name("BYTES")
      ->capture_default_str();
  app.add_option("--etcd-jobs-prefix", etcd_jobs_prefix,
                 "etcd key prefix of the jobs and nodes (--backend=etcd)")
      ->capture_default_str();
  app.set_version_flag("--version", absl::StrCat("dgt-rendezvous ", kVersion));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    parsed.exit_code = 0;
    return parsed;
  } catch (const CLI::CallForVersion&) {
    std::printf("dgt-rendezvous %s\n", kVersion);
    parsed.exit_code = 0;
    return parsed;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dgt-rendezvous: error: %s\n", e.what());
    parsed.exit_code = 2;
    return parsed;
  }

  // A whole number in [0, kMaxCount] for the per-run and per-peer limits.
  constexpr int64_t kMaxCount = 1000000;
  absl::Status bad;
  auto seconds = [&bad](const char* flag, const std::string& text, absl::Duration* out) {
    auto d = ParseDuration(flag, text, kMinPositiveFlagDuration, kMaxFlagDuration);
    if (d.ok()) *out = *d;
    if (bad.ok()) bad = d.status();
  };
  auto integer = [&bad](const char* flag, const std::string& text, int64_t min, int64_t max,
                        auto* out) {
    auto n = ParseInt64(flag, text, min, max);
    if (n.ok()) *out = static_cast<std::remove_pointer_t<decltype(out)>>(*n);
    if (bad.ok()) bad = n.status();
  };
  seconds("--last-call-timeout", last_call_timeout, &options.rounds.default_last_call_timeout);
  seconds("--join-timeout", join_timeout, &options.rounds.default_join_timeout);
  integer("--keepalive-time-ms", keepalive_time_ms, 100, 3600000,
          &options.keepalive.keepalive_time_ms);
  integer("--keepalive-timeout-ms", keepalive_timeout_ms, 100, 3600000,
          &options.keepalive.keepalive_timeout_ms);
  integer("--max-sessions-per-peer", max_sessions_per_peer, 0, kMaxCount,
          &options.max_sessions_per_peer);
  integer("--max-waiting-nodes-per-run", max_waiting_nodes, 0, kMaxCount,
          &options.rounds.max_waiting_nodes_per_run);
  int64_t lease_ttl_s = 2;
  integer("--leader-lease-s", leader_lease_s, 1, 3600, &lease_ttl_s);
  // etcd's own bound is 2 GiB; below 512 KiB a run's key and its buckets' framing may not fit.
  int64_t max_request_bytes = 0;
  integer("--etcd-max-request-bytes", etcd_max_request_bytes, int64_t{512} << 10, int64_t{1} << 31,
          &max_request_bytes);
  std::vector<std::string> endpoints;
  if (bad.ok() && backend_name != "memory" && backend_name != "etcd") {
    bad = absl::InvalidArgumentError(
        absl::StrCat("--backend: '", backend_name, "' is not one of memory, etcd"));
  }
  if (bad.ok() && backend_name == "etcd") {
    if (etcd_endpoints.empty()) {
      bad = absl::InvalidArgumentError("--backend=etcd needs --etcd-endpoints=HOST:PORT,...");
    } else if (auto parsed = ParseEndpoints(etcd_endpoints); parsed.ok()) {
      endpoints = *std::move(parsed);
    } else {
      bad = parsed.status();
    }
    if (bad.ok() && etcd_prefix.empty()) {
      bad = absl::InvalidArgumentError("--etcd-prefix: must not be empty");
    }
    // "/qa/runs" and "/qa/runs/" name one place: the runs' keys go under "/qa/runs/" and the
    // leader key, "/qa/runs.leader", stays outside their range (LeaderKeyFor).
    if (!absl::EndsWith(etcd_prefix, "/")) etcd_prefix += '/';
    if (!etcd_jobs_prefix.empty() && !absl::EndsWith(etcd_jobs_prefix, "/")) {
      etcd_jobs_prefix += '/';
    }
    if (bad.ok() && (etcd_jobs_prefix.empty() || absl::StartsWith(etcd_jobs_prefix, etcd_prefix) ||
                     absl::StartsWith(etcd_prefix, etcd_jobs_prefix))) {
      bad = absl::InvalidArgumentError(absl::StrCat("--etcd-jobs-prefix '", etcd_jobs_prefix,
                                                    "': must be non-empty and apart from "
                                                    "--etcd-prefix '",
                                                    etcd_prefix,
                                                    "' (neither a prefix of the other)"));
    }
  }
  if (bad.ok() && !advertise_address.empty()) {
    auto hp = ParseListenAddress(advertise_address, "--advertise-address");
    if (!hp.ok()) {
      bad = hp.status();
    } else if (hp->port == 0) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("--advertise-address '", advertise_address, "': needs a port in 1..65535"));
    } else if (!IsHostName(hp->host)) {
      // Agents are told this address by the standbys: it must be one they can dial.
      bad = absl::InvalidArgumentError(absl::StrCat("--advertise-address '", advertise_address,
                                                    "': '", hp->host,
                                                    "' is not a host name or IP address"));
    }
  }
  if (bad.ok() && app.count("--advertise-endpoint") > 0) {
    // Daemons hand it to dgt-run as --rdzv-endpoint: refused here as dgt-run would refuse it.
    auto list = replica::ParseEndpointList(server.jobs.scheduler.rdzv_endpoint, 29400,
                                           "--advertise-endpoint");
    if (!list.ok()) bad = list.status();
  }
  if (bad.ok() && backend_name == "memory") {
    // The replica flags only mean something with replicas, which share their runs through etcd.
    if (!etcd_endpoints.empty()) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "--etcd-endpoints '", etcd_endpoints, "' needs --backend=etcd (the backend is memory)"));
    }
    for (const auto& [flag, text] :
         {std::pair<const char*, const std::string&>{"--replica-id", replica_id},
          {"--advertise-address", advertise_address},
          {"--leader-lease-s", leader_lease_s},
          {"--etcd-max-request-bytes", etcd_max_request_bytes},
          {"--etcd-prefix", etcd_prefix}}) {
      if (bad.ok() && app.count(flag) > 0) {
        bad = absl::InvalidArgumentError(absl::StrCat(flag, " '", text,
                                                      "' needs --backend=etcd (the backend is "
                                                      "memory)"));
      }
    }
  }
  if (!bad.ok()) {
    PrintError(bad);
    parsed.exit_code = 2;
    return parsed;
  }
  if (!token_file.empty()) {
    auto token = rendezvous::ReadTokenFile(token_file);
    if (!token.ok()) {
      // As dgt-run's "--rdzv-token-file: ...": the flag, then the file and the reason.
      PrintError(
          absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message())));
      parsed.exit_code = 2;
      return parsed;
    }
    options.token = *token;
  }
  if (!submit_token_file.empty()) {
    auto token = rendezvous::ReadTokenFile(submit_token_file);
    if (!token.ok()) {
      PrintError(absl::InvalidArgumentError(
          absl::StrCat("--submit-token-file: ", token.status().message())));
      parsed.exit_code = 2;
      return parsed;
    }
    server.jobs.submit_token = *token;
  } else if (server.jobs.allow_unauthenticated_submit) {
    spdlog::warn(
        "dgt-rendezvous: --allow-unauthenticated-submit: anyone who reaches this port can run "
        "commands on the registered nodes");
  }
  for (const auto& [flag, text] :
       {std::pair<const char*, const std::string&>{"--listen", options.listen},
        {"--metrics-listen", options.metrics_listen}}) {
    if (text.empty()) continue;
    if (absl::Status s = ProbeBind(flag, text); !s.ok()) {
      PrintError(s);
      parsed.exit_code = ExitCodeFor(s);
      return parsed;
    }
  }
  if (!options.metrics_listen.empty()) {
    // Both on one port of one address: each bind alone passes the probe, the second fails.
    auto listen = ParseListenAddress(options.listen, "--listen");
    auto metrics = ParseListenAddress(options.metrics_listen, "--metrics-listen");
    auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::"; };
    if (listen.ok() && metrics.ok() && listen->port != 0 && listen->port == metrics->port &&
        (listen->host == metrics->host || wildcard(listen->host) || wildcard(metrics->host))) {
      PrintError(absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen '", options.metrics_listen, "' and --listen '",
                       options.listen, "' need different ports")));
      parsed.exit_code = 2;
      return parsed;
    }
  }
  options.replica_id = replica_id;  // Empty: HOSTNAME:PORT once the port is bound (Server).
  if (backend_name == "etcd") {
    EtcdOptions& etcd = server.etcd.emplace();
    etcd.endpoints = std::move(endpoints);
    etcd.prefix = etcd_prefix;
    etcd.jobs_prefix = etcd_jobs_prefix;
    etcd.advertise_address = advertise_address;
    etcd.lease_ttl_s = lease_ttl_s;
    etcd.max_request_bytes = max_request_bytes;
  }
  return parsed;
}

}  // namespace dgt::server
