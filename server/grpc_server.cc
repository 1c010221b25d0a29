#include "server/grpc_server.h"

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "grpcpp/health_check_service_interface.h"

namespace dgt::server {

absl::StatusOr<std::string> ResolveListenAddress(const std::string& listen) {
  auto hp = ParseListenAddress(listen, "--listen");
  if (!hp.ok()) return hp.status();
  auto ip = ResolveToIp(hp->host);
  if (!ip.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", ip.status().message()));
  }
  return FormatHostPort(*ip, hp->port);
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& options,
                                                              int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, options.credentials, port);
  for (grpc::Service* service : options.services) builder.RegisterService(service);
  // gRPC sets SO_REUSEPORT by default: a second service would then share the port and split the
  // agents of one run between two services.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 1 << 20);
  grpc::ResourceQuota quota("dgt-rendezvous");
  quota.Resize(size_t{4} << 30);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             options.keepalive_time_ms / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) {
    return absl::UnavailableError(absl::StrCat("rendezvous cannot listen on ", options.listen,
                                               ": the address is in use or not local"));
  }
  return server;
}

}  // namespace dgt::server
