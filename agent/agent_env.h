// AgentEnv: what the Agent reaches the machine through — time, processes, the network probe and
// the store servers it hosts — passed in rather than built inside, as LevelDB's Env reaches a DB
// through Options::env. AgentEnv::Default() is the real machine; a test (or the node daemon,
// which runs many jobs in one process) passes its own.
//
// The pointed-to objects are not owned and must outlive the Agent. Thread-compatible.
#ifndef DGT_AGENT_AGENT_ENV_H_
#define DGT_AGENT_AGENT_ENV_H_

#include <functional>
#include <memory>
#include <string>

#include "agent/lifecycle/restart_policy.h"
#include "agent/workers/process_launcher.h"
#include "dgt/store/server.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::agent {

struct AgentEnv {
  // Every `now` the agent hands its NodeLifecycle, and RestartTracker's history.
  const Clock* clock = nullptr;
  // Starts, signals and reaps the workers (WorkerGroup).
  ProcessLauncher* launcher = nullptr;
  // What NCCL needs to find InfiniBand for a MASTER_ADDR (`dgt doctor`'s report): RDMA devices
  // and the route to the store.
  std::function<worker::NetworkReport(const worker::NetworkEnvOptions&)> network_probe;
  // A store server this node hosts (the standby store and each round's, or the static
  // backend's); not started yet.
  std::function<std::unique_ptr<store::Server>(const store::ServerOptions&)> store_host;

  // The real machine: RealClock, fork/exec, ibverbs and the routing table, store::Server.
  static AgentEnv Default();
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_ENV_H_
