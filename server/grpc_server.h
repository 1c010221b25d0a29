// The gRPC server both of dgt's server binaries run: dgt-rendezvous (server/server.h: the
// rendezvous and the jobs services) and dgt-run's embedded rendezvous
// (rendezvous::RendezvousServer). One place for the listening address, the health service, the
// keepalive policy and the limits.
//
// Thread-safety: thread-compatible free functions.
#ifndef DGT_SERVER_GRPC_SERVER_H_
#define DGT_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace dgt::server {

// A --listen value ("host:port", "[v6]:port"; port 0 picks a free one) with its host resolved
// to an IP address: "ip:port", as gRPC binds it. Errors: InvalidArgument naming --listen.
absl::StatusOr<std::string> ResolveListenAddress(const std::string& listen);

struct GrpcServerOptions {
  // "ip:port" (ResolveListenAddress).
  std::string listen;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Milliseconds between keepalive pings, and to wait for a ping's answer
  // (rendezvous::KeepaliveOptions). Clients may ping every keepalive_time_ms / 2.
  int keepalive_time_ms = 1000;
  int keepalive_timeout_ms = 2000;
  // Served on the port, with the gRPC health service. Not owned; must outlive the server.
  std::vector<grpc::Service*> services;
};

// Builds and starts the server; `*port` is the bound port. No SO_REUSEPORT (a second server
// on the port would split the agents of one run), up to 2^20 concurrent streams per connection,
// a 4 GiB resource quota. Errors: Unavailable "rendezvous cannot listen on <listen>: ..." when
// the address cannot be bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& options,
                                                              int* port);

}  // namespace dgt::server

#endif  // DGT_SERVER_GRPC_SERVER_H_
