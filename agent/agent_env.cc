#include "agent/agent_env.h"

namespace dgt::agent {

AgentEnv AgentEnv::Default() {
  static const RealClock clock;
  AgentEnv env;
  env.clock = &clock;
  env.launcher = DefaultProcessLauncher();
  env.network_probe = [](const worker::NetworkEnvOptions& options) {
    worker::RealVerbsApi verbs;
    worker::RealRouteApi route;
    return worker::DeriveNetworkEnv(verbs, route, options);
  };
  env.store_host = [](const store::ServerOptions& options) {
    return std::make_unique<store::Server>(options);
  };
  return env;
}

}  // namespace dgt::agent
