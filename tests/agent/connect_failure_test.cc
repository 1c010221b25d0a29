#include "agent/coord/connect_failure.h"

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

// Last transport errors as gRPC 1.51 reports them on a channel that never connected.
constexpr char kRefused[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to "
    "connect to remote host: Connection refused";
constexpr char kWrongCa[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:29811: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed";
constexpr char kPlaintextService[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:29811: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number";
constexpr char kTlsService[] =
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:29811: Socket "
    "closed";

TEST(ConnectFailureTest, Classifies) {
  EXPECT_EQ(ClassifyConnectFailure(kRefused, false), ConnectFailure::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure(kRefused, true), ConnectFailure::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure("Deadline Exceeded", true), ConnectFailure::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure("", false), ConnectFailure::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure(kWrongCa, true), ConnectFailure::kCertificate);
  EXPECT_EQ(ClassifyConnectFailure("Ssl handshake failed: SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED",
                                   true),
            ConnectFailure::kCertificate);
  EXPECT_EQ(ClassifyConnectFailure("Peer name 127.0.0.2 is not in peer certificate", true),
            ConnectFailure::kCertificate);
  EXPECT_EQ(ClassifyConnectFailure(kPlaintextService, true), ConnectFailure::kTlsHandshake);
  EXPECT_EQ(ClassifyConnectFailure(kTlsService, false), ConnectFailure::kClosedPlaintext);
}

TEST(ConnectFailureTest, Describes) {
  EXPECT_EQ(DescribeConnectFailure("127.0.0.1:1", absl::Seconds(2), kRefused, false),
            "cannot reach the rendezvous service at 127.0.0.1:1 within 2s (is dgt-rendezvous "
            "running there? see --rdzv-connect-timeout)");
  EXPECT_EQ(DescribeConnectFailure("h:1", absl::Seconds(2), kWrongCa, true),
            "the rendezvous service at h:1 presented a certificate that --rdzv-tls-ca does not "
            "verify (signed by another CA, or not issued for this address)");
  EXPECT_EQ(DescribeConnectFailure("h:1", absl::Seconds(2), kPlaintextService, true),
            "the TLS handshake with the rendezvous service at h:1 failed (does it serve TLS, with "
            "--tls-cert and --tls-key? with --tls-client-ca it also needs --rdzv-tls-cert and "
            "--rdzv-tls-key)");
  EXPECT_EQ(DescribeConnectFailure("h:1", absl::Seconds(2), kTlsService, false),
            "the rendezvous service at h:1 closed the connection during the handshake: if it "
            "serves TLS, pass --rdzv-tls-ca (and --rdzv-tls-cert and --rdzv-tls-key for mutual "
            "TLS)");
}

}  // namespace
}  // namespace dgt::agent
