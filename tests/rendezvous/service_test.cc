// The rendezvous gRPC service over real loopback gRPC: sessions, bearer tokens, GetStatus, the
// health service and the Prometheus endpoint.
#include "rendezvous/service.h"

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testutil/forwarding_run_state_backend.h"
#include "tests/testutil/raw_client.h"

namespace dgt::rendezvous {
namespace {

constexpr char kToken[] = "s3cret-token";

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RendezvousServerOptions options;
    options.token = kToken;
    options.metrics_listen = "127.0.0.1:0";
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Rendezvous::NewStub(channel_);
  }

  void Authorize(grpc::ClientContext* ctx, const std::string& token = kToken) {
    ctx->AddMetadata(kAuthorizationKey, BearerValue(token));
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  std::unique_ptr<RendezvousServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

v1::AgentMessage JoinMessage(const std::string& node_id) {
  v1::AgentMessage m;
  v1::JoinRequest* j = m.mutable_join();
  j->set_run_id("svc");
  j->set_node_id(node_id);
  j->set_min_nodes(1);
  j->set_max_nodes(1);
  j->set_nproc_per_node(2);
  j->set_address("127.0.0.1");
  j->set_store_port(4242);
  return m;
}

TEST_F(ServiceTest, MissingOrWrongTokenIsUnauthenticated) {
  for (const char* token : {"", "wrong"}) {
    grpc::ClientContext ctx;
    if (*token != '\0') {
      Authorize(&ctx, token);
    } else {
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    }
    auto stream = stub_->Session(&ctx);
    stream->Write(JoinMessage("n1"));
    v1::ServiceMessage reply;
    EXPECT_FALSE(stream->Read(&reply));
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(st.error_message(), "missing or wrong bearer token");
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetStatusResponse response;
  EXPECT_EQ(stub_->GetStatus(&ctx, v1::GetStatusRequest(), &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServiceTest, JoinAssignsAndStatusShowsTheRun) {
  grpc::ClientContext ctx;
  Authorize(&ctx);
  auto stream = stub_->Session(&ctx);
  ASSERT_TRUE(stream->Write(JoinMessage("n1")));
  v1::ServiceMessage reply;
  ASSERT_TRUE(stream->Read(&reply));
  ASSERT_TRUE(reply.has_assignment()) << reply.DebugString();
  EXPECT_EQ(reply.assignment().world_size(), 2);
  EXPECT_EQ(reply.assignment().master_port(), 4242);

  grpc::ClientContext status_ctx;
  Authorize(&status_ctx);
  v1::GetStatusRequest request;
  request.set_run_id("svc");
  v1::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(&status_ctx, request, &status).ok());
  ASSERT_EQ(status.runs_size(), 1);
  EXPECT_EQ(status.runs(0).state(), "running");
  ASSERT_EQ(status.runs(0).nodes_size(), 1);
  EXPECT_EQ(status.runs(0).nodes(0).node_id(), "n1");
  EXPECT_EQ(status.runs(0).nodes(0).node_rank(), 0);

  v1::AgentMessage report;
  report.mutable_report()->set_round(0);
  report.mutable_report()->set_succeeded(true);
  ASSERT_TRUE(stream->Write(report));
  ASSERT_TRUE(stream->Read(&reply));
  ASSERT_TRUE(reply.has_finished());
  EXPECT_TRUE(reply.finished().succeeded());
  EXPECT_FALSE(stream->Read(&reply));  // The service ends the session after RunFinished.
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceTest, HealthServiceServes) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(ServiceTest, MetricsEndpointCountsJoins) {
  {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    auto stream = stub_->Session(&ctx);
    ASSERT_TRUE(stream->Write(JoinMessage("n1")));
    v1::ServiceMessage reply;
    ASSERT_TRUE(stream->Read(&reply));
    ctx.TryCancel();
    stream->Finish();
  }
  testing::RawClient http(static_cast<uint16_t>(server_->metrics_port()));
  ASSERT_TRUE(http.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string body;
  while (auto chunk = http.Recv(1)) body += *chunk;
  EXPECT_NE(body.find("HTTP/1.1 200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("\ndgt_rendezvous_joins_total 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\ndgt_rendezvous_rounds_total 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE dgt_rendezvous_runs gauge"), std::string::npos) << body;

  testing::RawClient other(static_cast<uint16_t>(server_->metrics_port()));
  ASSERT_TRUE(other.Send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string not_found;
  while (auto chunk = other.Recv(1)) not_found += *chunk;
  EXPECT_NE(not_found.find("HTTP/1.1 404 Not Found"), std::string::npos) << not_found;
}

v1::AgentMessage FloodJoin(const std::string& run_id, const std::string& node_id, int nodes) {
  v1::AgentMessage m = JoinMessage(node_id);
  m.mutable_join()->set_run_id(run_id);
  m.mutable_join()->set_min_nodes(nodes);
  m.mutable_join()->set_max_nodes(nodes);
  return m;
}

struct OpenSession {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServiceMessage>> stream;
};

std::unique_ptr<OpenSession> Open(v1::Rendezvous::Stub* stub) {
  auto s = std::make_unique<OpenSession>();
  s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  s->stream = stub->Session(&s->ctx);
  return s;
}

TEST(ServiceLimitsTest, SessionsBeyondThePerPeerLimitAreResourceExhausted) {
  RendezvousServerOptions options;
  options.max_sessions_per_peer = 2;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Rendezvous::NewStub(channel);
  std::vector<std::unique_ptr<OpenSession>> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(Open(stub.get()));
    ASSERT_TRUE(open.back()->stream->Write(FloodJoin("limited", absl::StrCat("n", i), 3)));
    v1::ServiceMessage reply;
    ASSERT_TRUE(open.back()->stream->Read(&reply));
    EXPECT_EQ(reply.progress().joined_nodes(), i + 1);
  }
  auto third = Open(stub.get());
  third->stream->Write(FloodJoin("limited", "n2", 3));
  v1::ServiceMessage reply;
  EXPECT_FALSE(third->stream->Read(&reply));
  grpc::Status st = third->stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(),
            "peer 127.0.0.1 already has 2 rendezvous sessions open (dgt-rendezvous "
            "--max-sessions-per-peer)");

  // One session ends: a new one is admitted (once the service has seen the end).
  open[0]->ctx.TryCancel();
  open[0]->stream->Finish();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool admitted = false;
  while (!admitted && std::chrono::steady_clock::now() < deadline) {
    auto again = Open(stub.get());
    again->stream->Write(FloodJoin("limited", "n3", 3));
    admitted = again->stream->Read(&reply);
    if (admitted) {
      EXPECT_EQ(reply.progress().joined_nodes(), 2);
      again->ctx.TryCancel();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    again->stream->Finish();
  }
  EXPECT_TRUE(admitted);
  for (auto& s : open) s->ctx.TryCancel();
  for (size_t i = 1; i < open.size(); ++i) open[i]->stream->Finish();
}

TEST(ServiceLimitsTest, OneOpenSessionIsSingular) {
  RendezvousServerOptions options;
  options.max_sessions_per_peer = 1;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  auto first = Open(stub.get());
  ASSERT_TRUE(first->stream->Write(FloodJoin("single", "n0", 3)));
  v1::ServiceMessage reply;
  ASSERT_TRUE(first->stream->Read(&reply));
  auto second = Open(stub.get());
  second->stream->Write(FloodJoin("single", "n1", 3));
  EXPECT_FALSE(second->stream->Read(&reply));
  grpc::Status st = second->stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(),
            "peer 127.0.0.1 already has 1 rendezvous session open (dgt-rendezvous "
            "--max-sessions-per-peer)");
  first->ctx.TryCancel();
  first->stream->Finish();
}

TEST(ServiceLimitsTest, AJoinFloodIsCappedAndDoesNotStallOtherRuns) {
  RendezvousServerOptions options;
  options.max_sessions_per_peer = 0;
  options.rounds.max_waiting_nodes_per_run = 100;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string endpoint = absl::StrCat("127.0.0.1:", (*server)->port());
  auto flood_stub =
      v1::Rendezvous::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  // One bad client: 300 joins into a run of 50 nodes, as fast as it can write them.
  std::vector<std::unique_ptr<OpenSession>> flood;
  for (int i = 0; i < 300; ++i) {
    flood.push_back(Open(flood_stub.get()));
    flood.back()->stream->Write(FloodJoin("flood", absl::StrCat("f", 1000 + i), 50));
  }
  // Another run, on its own connection, is served meanwhile.
  grpc::ChannelArguments args;
  args.SetInt("dgt.test.other", 1);  // Distinct args: its own connection.
  auto good_stub = v1::Rendezvous::NewStub(
      grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext good_ctx;
  good_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto good = good_stub->Session(&good_ctx);
  ASSERT_TRUE(good->Write(FloodJoin("good", "g0", 1)));
  v1::ServiceMessage reply;
  ASSERT_TRUE(good->Read(&reply));
  EXPECT_EQ(reply.assignment().run_id(), "good");
  EXPECT_EQ(reply.assignment().node_rank(), 0);

  int assigned = 0, waiting = 0, refused = 0;
  for (auto& s : flood) {
    ASSERT_TRUE(s->stream->Read(&reply));
    if (reply.has_assignment()) ++assigned;
    if (reply.has_progress()) ++waiting;
    if (reply.has_error()) {
      ++refused;
      EXPECT_EQ(reply.error().code(), 8);  // RESOURCE_EXHAUSTED
      EXPECT_EQ(reply.error().message(),
                "run 'flood' already holds 150 nodes (MAX 50 and 100 waiting); try again when a "
                "node leaves");
    }
  }
  // The 50th join closes the round; a node's first message is its assignment or, for the ones
  // that joined before it, the progress it got on joining.
  EXPECT_EQ(assigned + waiting, 150);
  EXPECT_EQ(refused, 150);
  good_ctx.TryCancel();
  good->Finish();
  for (auto& s : flood) s->ctx.TryCancel();
  for (auto& s : flood) s->stream->Finish();
}

// A RunStateBackend in memory whose commits are counted, can be held (a slow etcd write) and can
// fail (etcd unreachable), for the group commit.
class GatedBackend final : public ForwardingRunStateBackend {
 public:
  absl::StatusOr<Revision> Commit(absl::string_view id) override {
    const int n = ++commits;
    if (n == hold_commit) {
      held.Notify();
      // Bounded: the test releases it within seconds.
      if (!release.WaitForNotificationWithTimeout(absl::Seconds(20))) {
        return absl::DeadlineExceededError("test: commit never released");
      }
    }
    if (n == fail_commit) return absl::UnavailableError("etcd unreachable (test)");
    return ForwardingRunStateBackend::Commit(id);
  }

  std::atomic<int> commits{0};
  int hold_commit = 1;  // The commit (1-based) that waits for `release`.
  int fail_commit = 0;  // The commit that fails; 0: none.
  absl::Notification held;
  absl::Notification release;
};

// Polls `done` every 10 ms for up to 10 s.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

// The first node joins a run of 5 and its commit is held; the other 4 join meanwhile and queue.
// Returns the 5 sessions, their joins written.
std::vector<std::unique_ptr<OpenSession>> JoinFiveBehindAHeldCommit(RendezvousServer& server,
                                                                    GatedBackend& backend,
                                                                    v1::Rendezvous::Stub* stub) {
  std::vector<std::unique_ptr<OpenSession>> nodes;
  nodes.reserve(5);
  for (int i = 0; i < 5; ++i) nodes.push_back(Open(stub));
  // Every stream is open on the service before the commit is held (opening one takes the
  // service's mutex, which the commit holds).
  EXPECT_TRUE(Eventually([&] {
    return server.service()->RenderMetrics().find("dgt_rendezvous_sessions 5\n") !=
           std::string::npos;
  }));
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(nodes[i]->stream->Write(FloodJoin("gc", absl::StrCat("n", i), 5)));
    if (i == 0) {
      EXPECT_TRUE(backend.held.WaitForNotificationWithTimeout(absl::Seconds(10)));
    }
  }
  EXPECT_TRUE(Eventually([&] { return server.service()->queued_events() == 4; }));
  EXPECT_EQ(backend.commits.load(), 1);
  return nodes;
}

TEST(GroupCommitTest, JoinsDuringOneCommitAreCommittedByOneMoreWrite) {
  GatedBackend backend;
  RendezvousServerOptions options;
  options.rounds.backend = &backend;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  auto nodes = JoinFiveBehindAHeldCommit(**server, backend, stub.get());
  backend.release.Notify();
  // Every node is assigned (ranks in node-id order) after one more write: 2 commits, not 5.
  for (int i = 0; i < 5; ++i) {
    v1::ServiceMessage reply;
    do {
      ASSERT_TRUE(nodes[i]->stream->Read(&reply)) << "node " << i;
    } while (reply.has_progress());
    ASSERT_TRUE(reply.has_assignment()) << reply.DebugString();
    EXPECT_EQ(reply.assignment().node_rank(), i);
    EXPECT_EQ(reply.assignment().world_size(), 10);
  }
  EXPECT_EQ(backend.commits.load(), 2);
  EXPECT_EQ((*server)->service()->queued_events(), 0U);
  for (auto& n : nodes) n->ctx.TryCancel();
  for (auto& n : nodes) n->stream->Finish();
}

TEST(GroupCommitTest, AFailedBatchCommitSendsNothingOfItAndStepsDown) {
  GatedBackend backend;
  backend.fail_commit = 2;  // The batch of the 4 joins queued behind the first.
  std::atomic<int> step_downs{0};
  std::string why;
  RendezvousServerOptions options;
  options.rounds.backend = &backend;
  options.elected = true;
  options.replica_id = "r1";
  options.on_step_down = [&](const absl::Status& s) {
    why = std::string(s.message());
    ++step_downs;
  };
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->service()->TakeOver();
  ASSERT_TRUE((*server)->service()->is_leader());
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  auto nodes = JoinFiveBehindAHeldCommit(**server, backend, stub.get());
  backend.release.Notify();
  // Node 0's join was written: it hears its progress. Nothing of the failed batch (no
  // assignment, no progress) reaches any node: each stream ends with the step-down.
  v1::ServiceMessage reply;
  ASSERT_TRUE(nodes[0]->stream->Read(&reply));
  EXPECT_TRUE(reply.has_progress()) << reply.DebugString();
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(nodes[i]->stream->Read(&reply)) << "node " << i << ": " << reply.DebugString();
    grpc::Status status = nodes[i]->stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << "node " << i;
    EXPECT_EQ(status.error_message(), "replica r1 lost its leadership: etcd unreachable (test)");
  }
  EXPECT_EQ(backend.commits.load(), 2);
  // The service ends the streams first and then tells its election (on_step_down): wait for the
  // call (bounded); `why` is written before the counter, so it is read after it.
  for (int i = 0; i < 500 && step_downs.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(step_downs.load(), 1);
  EXPECT_EQ(why, "etcd unreachable (test)");
  EXPECT_FALSE((*server)->service()->is_leader());
  EXPECT_NE((*server)->service()->RenderMetrics().find("dgt_rendezvous_failed_commits_total 1\n"),
            std::string::npos);
}

TEST(RendezvousServerTest, BadOptionsAreReported) {
  RendezvousServerOptions tls;
  tls.tls.cert_file = "/nonexistent/cert.pem";
  tls.tls.key_file = "/nonexistent/key.pem";
  auto s = RendezvousServer::Start(tls);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "--tls-cert: cannot read '/nonexistent/cert.pem' (No such file or directory)");
  RendezvousServerOptions half;
  half.tls.cert_file = "/x.pem";
  EXPECT_EQ(RendezvousServer::Start(half).status().message(),
            "--tls-cert '/x.pem' needs --tls-key (given together)");
  RendezvousServerOptions key_only;
  key_only.tls.key_file = "/k.pem";
  EXPECT_EQ(RendezvousServer::Start(key_only).status().message(),
            "--tls-key '/k.pem' needs --tls-cert (given together)");
  // --tls-client-ca alone names itself.
  RendezvousServerOptions ca_only;
  ca_only.tls.ca_file = "/etc/passwd";
  EXPECT_EQ(RendezvousServer::Start(ca_only).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RendezvousServer::Start(ca_only).status().message(),
            "--tls-client-ca '/etc/passwd' needs --tls-cert and --tls-key (mutual TLS is on top of "
            "the service's own TLS)");
  RendezvousServerOptions metrics;
  metrics.metrics_listen = "localhost";
  EXPECT_EQ(RendezvousServer::Start(metrics).status().message(),
            "--metrics-listen: a port is required, got 'localhost'");
}

}  // namespace
}  // namespace dgt::rendezvous
