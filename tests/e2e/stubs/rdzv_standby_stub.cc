// A stand-in for a standby dgt-rendezvous replica (the HA contract), for
// tests/e2e/test_rdzv_failover.py: it answers every Session stream with
// replica::StandbyStatus("stub", "") as a replica that is not the leader does when no replica
// leads, and prints one line per refusal.
//
// Usage: rdzv_standby_stub LISTEN_HOST:PORT (port 0: a free one). Prints "listening on port N",
// then "refused a session" per stream; runs until killed.
#include <cstdio>
#include <memory>
#include <string>

#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "replica/leadership_status.h"

namespace {

namespace rdzv_v1 = ::dgt::rendezvous::v1;

class StandbyService final : public rdzv_v1::Rendezvous::Service {
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rdzv_v1::ServiceMessage, rdzv_v1::AgentMessage>* stream) override {
    std::printf("refused a session\n");
    std::fflush(stdout);
    return dgt::replica::StandbyStatus("stub", "");
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rdzv_standby_stub HOST:PORT\n");
    return 2;
  }
  StandbyService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(argv[1], grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "rdzv_standby_stub: cannot listen on %s\n", argv[1]);
    return 1;
  }
  std::printf("listening on port %d\n", port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
