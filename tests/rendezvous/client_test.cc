// The rendezvous client library: the channel arguments its options stand for, its TLS errors,
// and the bearer token it adds, against a real loopback service.
#include "rendezvous/client.h"

#include <chrono>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "rendezvous/service.h"

namespace dgt::rendezvous {
namespace {

// The integer channel arguments of `args`, by name.
std::map<std::string, int> IntArgs(const grpc::ChannelArguments& args) {
  std::map<std::string, int> out;
  grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) out[c.args[i].key] = c.args[i].value.integer;
  }
  return out;
}

TEST(ClientOptionsTest, DefaultsAreDgtRunsKeepaliveAndBackoff) {
  std::map<std::string, int> args = IntArgs(MakeChannelArguments(ClientOptions{}));
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIME_MS), 1000);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 2000);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 1);
  EXPECT_EQ(args.at(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA), 0);
  EXPECT_EQ(args.at(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS), 100);
  EXPECT_EQ(args.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 1000);
}

TEST(ClientOptionsTest, KeepaliveAndBackoffComeFromTheOptions) {
  ClientOptions options;
  options.keepalive.keepalive_time_ms = 5000;
  options.keepalive.keepalive_timeout_ms = 7000;
  options.initial_reconnect_backoff_ms = 250;
  options.max_reconnect_backoff_ms = 4000;
  std::map<std::string, int> args = IntArgs(MakeChannelArguments(options));
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIME_MS), 5000);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 7000);
  EXPECT_EQ(args.at(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS), 250);
  EXPECT_EQ(args.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 4000);
}

TEST(ClientOptionsTest, WithCredentialsKeepsTheDefaults) {
  ClientOptions options = ClientOptions::WithCredentials({"c.pem", "k.pem", "ca.pem"}, "tok");
  EXPECT_EQ(options.tls.cert_file, "c.pem");
  EXPECT_EQ(options.tls.key_file, "k.pem");
  EXPECT_EQ(options.tls.ca_file, "ca.pem");
  EXPECT_EQ(options.token, "tok");
  EXPECT_EQ(options.keepalive.keepalive_time_ms, 1000);
  EXPECT_EQ(options.keepalive.keepalive_timeout_ms, 2000);
  EXPECT_EQ(options.initial_reconnect_backoff_ms, 100);
  EXPECT_EQ(options.max_reconnect_backoff_ms, 1000);
}

TEST(CreateClientChannelTest, UnreadableCaFileIsInvalidArgumentNamingFlagAndPath) {
  ClientOptions options;
  options.tls.ca_file = "/nonexistent/ca.pem";
  auto channel = CreateClientChannel("127.0.0.1:1", options);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(channel.status().message(),
            "--rdzv-tls-ca: cannot read '/nonexistent/ca.pem' (No such file or directory)");
}

// A directory given as the token file is named as one (an ifstream reads it as empty).
TEST(ReadTokenFileTest, ADirectoryIsNamedAsOne) {
  auto token = ReadTokenFile("/");
  EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(token.status().message(), "token file: '/' is a directory, not a file");
  auto missing = ReadTokenFile("/nonexistent/token");
  EXPECT_EQ(missing.status().message(),
            "token file: cannot read '/nonexistent/token' (No such file or directory)");
}

TEST(CreateClientChannelTest, CertWithoutKeyIsInvalidArgument) {
  ClientOptions options;
  options.tls.cert_file = "/nonexistent/cert.pem";
  auto channel = CreateClientChannel("127.0.0.1:1", options);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(channel.status().message(),
            "--rdzv-tls-cert and --rdzv-tls-key must be given together");
}

class ClientAgainstServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RendezvousServerOptions options;
    options.token = "s3cret";
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // GetStatus through the client library with `options`, within 10 s.
  grpc::Status GetStatus(const ClientOptions& options) {
    auto channel = CreateClientChannel(absl::StrCat("127.0.0.1:", server_->port()), options);
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no channel");
    grpc::ClientContext context;
    AuthorizeCall(options, &context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.set_wait_for_ready(true);
    v1::GetStatusResponse response;
    return NewRendezvousStub(*channel)->GetStatus(&context, v1::GetStatusRequest(), &response);
  }

  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(ClientAgainstServiceTest, TheTokenFromTheOptionsIsAccepted) {
  grpc::Status status = GetStatus(ClientOptions::WithCredentials({}, "s3cret"));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(ClientAgainstServiceTest, NoTokenIsUnauthenticated) {
  EXPECT_EQ(GetStatus(ClientOptions{}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ClientAgainstServiceTest, AWrongTokenIsUnauthenticated) {
  EXPECT_EQ(GetStatus(ClientOptions::WithCredentials({}, "other")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace dgt::rendezvous
