// c10d-style hosting of the rendezvous service by an agent: when --rdzv-endpoint names an address
// of this host and nothing serves that port yet, the agent that binds it first hosts the service
// in-process (as --standalone embeds it); every agent, the host included, then joins through the
// endpoint as usual. docs/RENDEZVOUS.md, "Hosting the service in an agent".
//
// Thread-compatible.
#ifndef DGT_AGENT_COORD_RENDEZVOUS_HOST_H_
#define DGT_AGENT_COORD_RENDEZVOUS_HOST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "agent/flags/launch_options.h"
#include "rendezvous/service.h"

namespace dgt::agent {

struct RendezvousHostOptions {
  // --rdzv-conf is_host: unset → host when the endpoint is local and free; true → host or fail;
  // false → never host.
  std::optional<bool> is_host;
  // The agent's --rdzv-tls-ca: a TLS endpoint is never hosted by an agent (an agent has no
  // server certificate); run dgt-rendezvous.
  bool tls = false;
  // The agent's bearer token: the hosted service requires it on every RPC.
  std::string token;
  // The agent's node id, told to every agent in its assignments (Assignment.host_node_id).
  std::string node_id;
};

// Whether `ip`:`port` (a numeric address) can be bound here right now: the address is one of
// this host's (loopback included) and no socket listens on the port. Binds and closes a socket.
bool CanBindHere(const std::string& ip, uint16_t port);

// Starts the rendezvous service on `ip`:`port` when this agent should host it (see above);
// returns nullptr when another process serves the endpoint, it is not an address of this host,
// or hosting is off.
// Errors: FailedPrecondition when is_host=1 but the endpoint cannot be hosted here.
absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const std::string& ip, uint16_t port, const RendezvousHostOptions& options);

// As above with the agent's flags (--rdzv-conf is_host, --rdzv-tls-ca, --rdzv-token-file).
// Errors: also InvalidArgument when the token file cannot be read.
absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const std::string& ip, uint16_t port, const LaunchOptions& options);

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_RENDEZVOUS_HOST_H_
