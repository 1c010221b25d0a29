#include "rendezvous/client.h"

namespace dgt::rendezvous {

grpc::ChannelArguments MakeChannelArguments(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive.keepalive_time_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive.keepalive_timeout_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Pings go on while no data flows (an agent waiting for a long round).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, options.initial_reconnect_backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, options.max_reconnect_backoff_ms);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& endpoint,
                                                                   const ClientOptions& options) {
  auto credentials = MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  return grpc::CreateCustomChannel(endpoint, *credentials, MakeChannelArguments(options));
}

void AuthorizeCall(const ClientOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) context->AddMetadata(kAuthorizationKey, BearerValue(options.token));
}

std::unique_ptr<v1::Rendezvous::StubInterface> NewRendezvousStub(
    const std::shared_ptr<grpc::Channel>& channel) {
  return v1::Rendezvous::NewStub(channel);
}

}  // namespace dgt::rendezvous
