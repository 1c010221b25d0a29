// The server layer (server/server.h) in memory: the rendezvous, jobs and health services on one
// port, the one bearer-token check on both services, the jobs service following the rendezvous'
// leadership, and the metrics endpoint.
#include "server/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/bearer_token.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dgt::server {
namespace {

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

std::shared_ptr<grpc::Channel> ChannelTo(const Server& server) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.port()),
                             grpc::InsecureChannelCredentials());
}

ServerOptions Loopback() {
  ServerOptions options;
  options.rendezvous.listen = "127.0.0.1:0";
  return options;
}

TEST(ServerTest, ServesBothServicesAndHealthOnOnePortAndLeadsInMemory) {
  auto started = Server::Start(Loopback());
  ASSERT_TRUE(started.ok()) << started.status();
  Server& server = **started;
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.metrics_port(), 0);
  ASSERT_NE(server.rendezvous(), nullptr);
  ASSERT_NE(server.jobs(), nullptr);
  EXPECT_EQ(server.etcd_runs(), nullptr);
  EXPECT_EQ(server.etcd_jobs(), nullptr);
  EXPECT_TRUE(server.is_leader());

  auto channel = ChannelTo(server);
  grpc::ClientContext status_ctx;
  Deadline(&status_ctx);
  rendezvous::v1::GetStatusResponse status;
  EXPECT_TRUE(rendezvous::v1::Rendezvous::NewStub(channel)
                  ->GetStatus(&status_ctx, rendezvous::v1::GetStatusRequest(), &status)
                  .ok());
  EXPECT_TRUE(status.from_leader());

  grpc::ClientContext jobs_ctx;
  Deadline(&jobs_ctx);
  jobs::v1::ListJobsResponse jobs;
  EXPECT_TRUE(jobs::v1::Jobs::NewStub(channel)
                  ->ListJobs(&jobs_ctx, jobs::v1::ListJobsRequest(), &jobs)
                  .ok());
  EXPECT_EQ(jobs.jobs_size(), 0);

  grpc::ClientContext health_ctx;
  Deadline(&health_ctx);
  grpc::health::v1::HealthCheckResponse health;
  ASSERT_TRUE(grpc::health::v1::Health::NewStub(channel)
                  ->Check(&health_ctx, grpc::health::v1::HealthCheckRequest(), &health)
                  .ok());
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  server.Shutdown(absl::Milliseconds(200));
  server.Shutdown();  // Idempotent.
}

TEST(ServerTest, TheAgentsTokenGuardsBothServices) {
  ServerOptions options = Loopback();
  options.rendezvous.token = "agents";
  auto started = Server::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  auto channel = ChannelTo(**started);

  grpc::ClientContext without;
  Deadline(&without);
  rendezvous::v1::GetStatusResponse status;
  grpc::Status refused = rendezvous::v1::Rendezvous::NewStub(channel)->GetStatus(
      &without, rendezvous::v1::GetStatusRequest(), &status);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.error_message(), "missing or wrong bearer token");

  grpc::ClientContext with;
  Deadline(&with);
  with.AddMetadata(kAuthorizationKey, BearerValue("agents"));
  EXPECT_TRUE(rendezvous::v1::Rendezvous::NewStub(channel)
                  ->GetStatus(&with, rendezvous::v1::GetStatusRequest(), &status)
                  .ok());

  // Register needs the agents' token too: the stream ends UNAUTHENTICATED at once.
  grpc::ClientContext node;
  Deadline(&node);
  auto stream = jobs::v1::Jobs::NewStub(channel)->Register(&node);
  jobs::v1::ControlMessage control;
  EXPECT_FALSE(stream->Read(&control));
  grpc::Status register_status = stream->Finish();
  EXPECT_EQ(register_status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(register_status.error_message(), "missing or wrong bearer token");
}

TEST(ServerTest, WithoutJobsOnlyTheRendezvousServes) {
  ServerOptions options = Loopback();
  options.serve_jobs = false;
  options.rendezvous.metrics_listen = "127.0.0.1:0";
  auto started = Server::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ((*started)->jobs(), nullptr);
  EXPECT_GT((*started)->metrics_port(), 0);
  EXPECT_TRUE((*started)->is_leader());
  grpc::ClientContext ctx;
  Deadline(&ctx);
  jobs::v1::ListJobsResponse jobs;
  EXPECT_EQ(jobs::v1::Jobs::NewStub(ChannelTo(**started))
                ->ListJobs(&ctx, jobs::v1::ListJobsRequest(), &jobs)
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST(ServerTest, BadOptionsAreReported) {
  ServerOptions options;
  options.rendezvous.listen = "nonsense";
  auto started = Server::Start(options);
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  ServerOptions tls = Loopback();
  tls.rendezvous.tls.cert_file = "/nonexistent/cert.pem";
  EXPECT_EQ(Server::Start(tls).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgt::server
