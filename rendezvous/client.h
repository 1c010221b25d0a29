// What a client of the rendezvous service (dgt-run's agent, `dgt status`) needs to reach it: one
// place that turns TLS files, a bearer token and keepalive settings into a gRPC channel, call
// metadata and a stub. The agent's Session stream (agent/rendezvous_session.h) and the CLI's
// GetStatus call both go through here, so the two cannot drift apart. Clients read and write the
// stream's messages as the domain types (rendezvous/types.h) with the conversions of
// rendezvous/proto_convert.h, included here: FromProto(v1::ServiceMessage) for what the service
// says, ToProto(AgentMessage) for what the agent sends (a JoinRequest's `rejoin` is the domain
// Assignment it holds).
//
// Links gRPC and the generated protos, never the service (rendezvous/service.h) or its metrics
// HTTP server. Thread-compatible free functions; the channel and stub they return are
// thread-safe (gRPC's).
#ifndef DGT_RENDEZVOUS_CLIENT_H_
#define DGT_RENDEZVOUS_CLIENT_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/credentials.h"
#include "rendezvous/keepalive.h"
#include "rendezvous/proto_convert.h"  // IWYU pragma: export
#include "rendezvous/types.h"          // IWYU pragma: export

namespace dgt::rendezvous {

// How a client connects. The defaults are dgt-run's: plaintext, no token, pings every second
// (a silent service is declared dead after 3 s), and quick reconnects while a service starts.
struct ClientOptions {
  // PEM files (rendezvous/credentials.h): ca turns TLS on; cert + key add a client certificate
  // (mutual TLS). All empty: plaintext.
  TlsFiles tls;
  // Bearer token sent on every call as "authorization: Bearer <token>"; empty: none.
  std::string token;
  // Client pings (GRPC_ARG_KEEPALIVE_TIME_MS / _TIMEOUT_MS); sent on idle connections too
  // (GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), as an agent's stream can be quiet for a long
  // time. Must agree with the service's (rendezvous/keepalive.h).
  KeepaliveOptions keepalive;
  // Milliseconds before the first reconnect after a refused connection, and the most between
  // two (GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS / GRPC_ARG_MAX_RECONNECT_BACKOFF_MS; gRPC's own
  // defaults are 1 s and 120 s, too slow for agents that start before the service).
  int initial_reconnect_backoff_ms = 100;
  int max_reconnect_backoff_ms = 1000;

  // The defaults with these credentials (dgt-run's --rdzv-tls-* files and token).
  static ClientOptions WithCredentials(TlsFiles tls, std::string token) {
    ClientOptions options;
    options.tls = std::move(tls);
    options.token = std::move(token);
    return options;
  }
};

// The channel arguments `options` stand for (keepalive and reconnect backoff).
grpc::ChannelArguments MakeChannelArguments(const ClientOptions& options);

// A channel to `endpoint` ("host:port"); it connects lazily, as gRPC channels do.
// Errors: InvalidArgument for unreadable or mismatched TLS files (MakeChannelCredentials).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& endpoint,
                                                                   const ClientOptions& options);

// Adds the bearer token of `options` to a call's metadata (nothing when the token is empty).
// Call before the call starts.
void AuthorizeCall(const ClientOptions& options, grpc::ClientContext* context);

// A stub over `channel`, as the interface the generated code offers (tests pass a mock).
std::unique_ptr<v1::Rendezvous::StubInterface> NewRendezvousStub(
    const std::shared_ptr<grpc::Channel>& channel);

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_CLIENT_H_
