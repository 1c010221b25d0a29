// NodeSetup: what a node finds out and opens before it joins a run — its node and run ids, the
// address other nodes reach it at, the store it hosts, and either the rendezvous service's
// endpoints (with the service hosted in-process when the flags say so) or the static backend's
// one round. PrepareNode blocks (name resolution, binding ports); it runs before the agent's
// event loop.
#ifndef DGT_AGENT_NODE_SETUP_H_
#define DGT_AGENT_NODE_SETUP_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "agent/agent_env.h"
#include "agent/coord/rendezvous_coordinator.h"
#include "agent/coord/static_coordinator.h"
#include "agent/flags/launch_options.h"
#include "agent/workers/worker_env.h"
#include "dgt/store/server.h"

namespace dgt::agent {

struct NodeSetup {
  // MASTER_ADDR when this node is node rank 0: --local-addr, else the local address of the
  // interface that routes to the rendezvous service (or to --master-addr).
  std::string advertised_address;
  // Started. The rendezvous backend: the standby store; the static backend: node rank 0's
  // store at --master-addr:--master-port (null on the other nodes).
  std::unique_ptr<store::Server> store;
  // The rendezvous backend: its endpoints, TLS files, token and the service hosted here.
  std::optional<RendezvousCoordinator::Options> rendezvous;
  // The static backend (--rdzv-backend=static with several nodes): its coordinator and the
  // one round it runs.
  std::optional<StaticCoordinator::Options> static_backend;
  NodeAssignment assignment;
};

// Fills in `options`' node id (and --standalone's run id) when not given, then resolves and opens
// what NodeSetup holds. Errors: InvalidArgument for a flag whose value is wrong (a usage error);
// anything else with `*exit_status` the status to exit with (69 when the rendezvous service is
// unreachable, else 1).
absl::StatusOr<NodeSetup> PrepareNode(LaunchOptions& options, const AgentEnv& env,
                                      int* exit_status);

}  // namespace dgt::agent

#endif  // DGT_AGENT_NODE_SETUP_H_
