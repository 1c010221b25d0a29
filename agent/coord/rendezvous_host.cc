#include "agent/coord/rendezvous_host.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/logging.h"

namespace dgt::agent {

bool CanBindHere(const std::string& ip, uint16_t port) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(ip.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    // As gRPC binds: SO_REUSEADDR, so a port in TIME_WAIT counts as free, a listening one not.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ok = ::bind(fd, found->ai_addr, found->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return ok;
}

absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const std::string& ip, uint16_t port, const RendezvousHostOptions& options) {
  const std::string endpoint = FormatHostPort(ip, port);
  if (options.is_host == false) return nullptr;
  if (options.tls) {
    if (options.is_host == true) {
      return absl::FailedPreconditionError(
          "--rdzv-conf is_host=1 cannot be combined with --rdzv-tls-*: an agent hosts the "
          "rendezvous without TLS; run dgt-rendezvous with --tls-cert for TLS");
    }
    return nullptr;
  }
  const bool unspecified = ip == "0.0.0.0" || ip == "::";
  if (unspecified || port == 0 || !CanBindHere(ip, port)) {
    if (options.is_host == true) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--rdzv-conf is_host=1, but ", endpoint,
          " cannot be served here (not an address of this host, or the port is in use)"));
    }
    return nullptr;
  }
  rendezvous::RendezvousServerOptions server_options;
  server_options.listen = endpoint;
  server_options.token = options.token;
  server_options.rounds.host_node_id = options.node_id;
  auto server = rendezvous::RendezvousServer::Start(server_options);
  if (!server.ok()) {
    // Another agent of this host bound the port between the probe and here: it hosts.
    if (options.is_host == true) return server.status();
    spdlog::debug("rendezvous: not hosting {}: {}", endpoint, server.status().message());
    return nullptr;
  }
  spdlog::info("rendezvous: hosting the rendezvous service on {} (--rdzv-endpoint is this host)",
               endpoint);
  return std::move(*server);
}

absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const std::string& ip, uint16_t port, const LaunchOptions& options) {
  RendezvousHostOptions host;
  host.is_host = options.rdzv_is_host;
  host.tls = !options.rdzv_tls_ca.empty();
  host.node_id = options.node_id;
  if (!options.rdzv_token_file.empty() && options.rdzv_is_host != false) {
    auto token = rendezvous::ReadTokenFile(options.rdzv_token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-token-file: ", token.status().message()));
    }
    host.token = *token;
  }
  return MaybeHostRendezvous(ip, port, host);
}

}  // namespace dgt::agent
