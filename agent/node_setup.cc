#include "agent/node_setup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/coord/rendezvous_host.h"
#include "agent/exit_codes.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/resolve_wait.h"
#include "common/status_macros.h"
#include "dgt/worker/net_discovery.h"
#include "replica/endpoint_list.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

bool IsIpLiteral(const std::string& text) {
  in6_addr buf;
  return inet_pton(AF_INET, text.c_str(), &buf) == 1 ||
         inet_pton(AF_INET6, text.c_str(), &buf) == 1;
}

std::string DefaultNodeId() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", ::getpid());
}

std::string RandomRunId() {
  std::random_device rd;
  return absl::StrCat("standalone-", absl::Hex(rd(), absl::kZeroPad8));
}

absl::StatusOr<NodeSetup> PrepareStatic(const LaunchOptions& options, const AgentEnv& env,
                                        int* exit_status) {
  NodeSetup setup;
  // torchrun's static backend: fixed --nnodes, --node-rank, and node rank 0's agent hosts the
  // store at --master-addr:--master-port. No rendezvous service. Node rank 0's name may be
  // published late (a Kubernetes headless Service): wait for it up to the join timeout.
  auto master = ResolveWithin(options.master_addr, "node rank 0's name (--master-addr)",
                              absl::Seconds(options.join_timeout_s), options.join_timeout_flag,
                              RealResolveWaitEnv("dgt-run: "));
  if (!master.ok()) {
    *exit_status = kExitRendezvousUnavailable;
    return master.status();
  }
  const int node_rank = std::max(options.node_rank, 0);
  if (node_rank == 0) {
    store::ServerOptions store_options;
    // Every interface, as torch's TCPStore: the other nodes reach --master-addr.
    store_options.host = master->find(':') != std::string::npos ? "::" : "0.0.0.0";
    store_options.port = static_cast<uint16_t>(options.master_port);
    setup.store = env.store_host(store_options);
    if (absl::Status s = setup.store->Start(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("node rank 0 cannot host the store on port ",
                                                 options.master_port, ": ", s.message()));
    }
  }
  setup.advertised_address = options.local_addr.empty() ? *master : options.local_addr;
  if (options.local_addr.empty()) {
    auto local = RoutedLocalAddress(*master);
    if (local.ok()) setup.advertised_address = *local;
  }
  setup.assignment.run_id = options.run_id;
  setup.assignment.node_rank = node_rank;
  setup.assignment.node_count = options.max_nodes;
  setup.assignment.world_size = options.max_nodes * options.nproc_per_node;
  setup.assignment.first_global_rank = node_rank * options.nproc_per_node;
  setup.assignment.local_world_size = options.nproc_per_node;
  setup.assignment.master_addr = *master;
  setup.assignment.master_port = options.master_port;
  setup.assignment.max_restarts = options.max_restarts;

  StaticCoordinator::Options co;
  co.run_id = options.run_id;
  co.node_rank = node_rank;
  co.node_count = options.max_nodes;
  co.master_addr = *master;
  co.master_port = options.master_port;
  co.connect_timeout = absl::Seconds(options.connect_timeout_s);
  co.finish_timeout = absl::Seconds(options.join_timeout_s);
  setup.static_backend = co;
  return setup;
}

}  // namespace

absl::StatusOr<NodeSetup> PrepareNode(LaunchOptions& options, const AgentEnv& env,
                                      int* exit_status) {
  if (options.node_id.empty()) options.node_id = DefaultNodeId();
  if (!options.logs_specs.empty()) {
    // torchrun loads a Python LogsSpecs class by this name; dgt-run has no Python in-process.
    spdlog::warn(
        "dgt-run: --logs-specs={} is ignored: dgt-run's log layout is fixed (--log-dir, -r, -t)",
        options.logs_specs);
  }
  if (options.rdzv_backend == "static" && options.max_nodes > 1 && options.rdzv_endpoint.empty()) {
    return PrepareStatic(options, env, exit_status);
  }

  NodeSetup setup;
  RendezvousCoordinator::Options rdzv;
  std::string rdzv_endpoint;               // The endpoint of the first session.
  std::optional<HostPort> host_candidate;  // The endpoint, which this agent may host.
  std::optional<HostPort> endpoint;
  // Several replicas of dgt-rendezvous (--rdzv-endpoint a:29400,b:29400): never hosted here.
  std::vector<HostPort> replicas;
  if (absl::StrContains(options.rdzv_endpoint, ',')) {
    DGT_ASSIGN_OR_RETURN(
        replicas, replica::ParseEndpointList(options.rdzv_endpoint, 29400, "--rdzv-endpoint"));
  }
  std::vector<std::string> endpoints;  // Resolved, in the given order.
  std::string route_to;                // An IP of the service: MASTER_ADDR routes to it.
  if (!replicas.empty()) {
    // Two names of one replica ("localhost:1" and "127.0.0.1:1"), as dgt-agent refuses them.
    if (auto same = replica::FindSameReplica(replicas)) {
      const HostPort& first = replicas[same->first];
      const HostPort& second = replicas[same->second];
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-endpoint=", options.rdzv_endpoint, ": ", FormatHostPort(first.host, first.port),
          " and ", FormatHostPort(second.host, second.port), " are both ", same->address,
          "; list each replica once"));
    }
    std::string unresolved;
    for (const HostPort& hp : replicas) {
      auto ip = ResolveToIp(hp.host);
      if (!ip.ok()) {
        // gRPC resolves the name again at each attempt: it may appear later (a Kubernetes
        // service's DNS record).
        spdlog::warn("dgt-run: --rdzv-endpoint: {}; trying it by name", ip.status().message());
        unresolved = std::string(ip.status().message());
        endpoints.push_back(FormatHostPort(hp.host, hp.port));
        continue;
      }
      if (route_to.empty()) route_to = *ip;
      endpoints.push_back(FormatHostPort(*ip, hp.port));
    }
    if (route_to.empty()) {
      *exit_status = kExitRendezvousUnavailable;
      return absl::UnavailableError(
          absl::StrCat("--rdzv-endpoint: no replica's name resolves (last: ", unresolved, ")"));
    }
    rdzv_endpoint = endpoints.front();
  } else if (!options.rdzv_endpoint.empty()) {
    DGT_ASSIGN_OR_RETURN(endpoint,
                         ParseHostPortOrFree(options.rdzv_endpoint, 29400, "--rdzv-endpoint"));
  }
  if (!replicas.empty()) {
    // Resolved above.
  } else if (options.rdzv_endpoint.empty()) {
    // --standalone, or one node without an endpoint: embed the rendezvous on a free port.
    auto server = rendezvous::RendezvousServer::Start(rendezvous::RendezvousServerOptions{});
    if (!server.ok()) return server.status();
    rdzv.embedded = std::move(*server);
    rdzv_endpoint = absl::StrCat("127.0.0.1:", rdzv.embedded->port());
    if (options.run_id == "none") options.run_id = RandomRunId();
  } else if (endpoint->port == 0) {
    // torchrun 2.x's "--rdzv-endpoint HOST:0" (one node; launch_options refuses more): the
    // rendezvous is embedded on a free port of HOST, which must be this host's.
    auto ip = ResolveToIp(endpoint->host);
    if (!ip.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-endpoint: ", ip.status().message()));
    }
    if (auto s = CheckLocalAddress(*ip); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-endpoint=", options.rdzv_endpoint,
                                                     ": port 0 asks for a free port here, but ",
                                                     s.message()));
    }
    rendezvous::RendezvousServerOptions server_options;
    server_options.listen = FormatHostPort(*ip, 0);
    auto server = rendezvous::RendezvousServer::Start(server_options);
    if (!server.ok()) return server.status();
    rdzv.embedded = std::move(*server);
    rdzv_endpoint = FormatHostPort(*ip, static_cast<uint16_t>(rdzv.embedded->port()));
    spdlog::info("dgt-run: --rdzv-endpoint={}: rendezvous on the free port {}",
                 options.rdzv_endpoint, rdzv_endpoint);
  } else {
    auto hp = ParseHostPort(options.rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!hp.ok()) return hp.status();
    // A name that does not resolve yet (a Kubernetes service's DNS record appears late) is
    // waited for up to the join timeout; then it is an unreachable service: retrying the node
    // later may work.
    auto ip = ResolveWithin(hp->host, "the rendezvous endpoint (--rdzv-endpoint)",
                            absl::Seconds(options.join_timeout_s), options.join_timeout_flag,
                            RealResolveWaitEnv("dgt-run: "));
    if (!ip.ok()) {
      *exit_status = kExitRendezvousUnavailable;
      return ip.status();
    }
    rdzv_endpoint = FormatHostPort(*ip, hp->port);
    host_candidate = HostPort{*ip, hp->port};
  }

  // MASTER_ADDR must be an address other nodes reach: --local-addr (resolved here), else the
  // local address of the interface that routes to the rendezvous service.
  if (!options.local_addr.empty()) {
    if (IsIpLiteral(options.local_addr)) {
      setup.advertised_address = options.local_addr;
    } else {
      auto ip = ResolveToIp(options.local_addr);
      if (!ip.ok())
        return absl::InvalidArgumentError(absl::StrCat("--local-addr: ", ip.status().message()));
      setup.advertised_address = *ip;
    }
  } else {
    if (route_to.empty()) route_to = ParseHostPort(rdzv_endpoint, 29400, "endpoint")->host;
    auto local = RoutedLocalAddress(route_to);
    if (!local.ok()) return local.status();
    setup.advertised_address = *local;
  }

  // The store listens before we join, so node rank 0's MASTER_PORT is ready when the round
  // closes; other nodes stop theirs once assigned.
  store::ServerOptions store_options;
  store_options.host = setup.advertised_address;
  if (options.master_port_set && options.max_nodes == 1) {
    store_options.port = static_cast<uint16_t>(options.master_port);
  }
  setup.store = env.store_host(store_options);
  if (auto s = setup.store->Start(); !s.ok()) return s;

  rdzv.tls = {options.rdzv_tls_cert, options.rdzv_tls_key, options.rdzv_tls_ca};
  if (!options.rdzv_token_file.empty()) {
    auto t = rendezvous::ReadTokenFile(options.rdzv_token_file);
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-token-file: ", t.status().message()));
    rdzv.token = *t;
  }
  if (host_candidate) {
    // c10d-style: the first agent of the endpoint's host serves it. After every flag is checked,
    // so that a usage error does not start a service first.
    DGT_ASSIGN_OR_RETURN(rdzv.embedded,
                         MaybeHostRendezvous(host_candidate->host, host_candidate->port, options));
  }
  if (endpoints.empty()) endpoints.push_back(rdzv_endpoint);
  rdzv.endpoints = std::move(endpoints);
  setup.rendezvous = std::move(rdzv);
  return setup;
}

}  // namespace dgt::agent
