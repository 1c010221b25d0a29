#include "agent/coord/connect_failure.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dgt::agent {
namespace {

bool ContainsAny(absl::string_view text, std::initializer_list<absl::string_view> needles) {
  for (absl::string_view n : needles) {
    if (absl::StrContains(text, n)) return true;
  }
  return false;
}

}  // namespace

ConnectFailure ClassifyConnectFailure(absl::string_view grpc_error, bool tls) {
  const std::string e = absl::AsciiStrToLower(grpc_error);
  // Before any byte was exchanged: the same for TLS and plaintext.
  if (ContainsAny(e, {"connection refused", "no route to host", "network is unreachable",
                      "dns resolution failed", "name resolution", "deadline exceeded"})) {
    return ConnectFailure::kUnreachable;
  }
  if (tls) {
    // OpenSSL 3 "certificate verify failed", BoringSSL "CERTIFICATE_VERIFY_FAILED", and gRPC's
    // own check of the name: "Peer name 127.0.0.2 is not in peer certificate".
    if (ContainsAny(e, {"certificate verify failed", "certificate_verify_failed",
                        "is not in peer certificate"})) {
      return ConnectFailure::kCertificate;
    }
    if (ContainsAny(e, {"handshake", "ssl", "tls", "socket closed", "connection reset",
                        "end of file", "eof"})) {
      return ConnectFailure::kTlsHandshake;
    }
    return ConnectFailure::kUnreachable;
  }
  if (ContainsAny(e, {"socket closed", "connection reset", "end of file", "eof", "handshake",
                      "broken pipe", "connection closed"})) {
    return ConnectFailure::kClosedPlaintext;
  }
  return ConnectFailure::kUnreachable;
}

std::string DescribeConnectFailure(absl::string_view endpoint, absl::Duration timeout,
                                   absl::string_view grpc_error, bool tls) {
  switch (ClassifyConnectFailure(grpc_error, tls)) {
    case ConnectFailure::kCertificate:
      return absl::StrCat("the rendezvous service at ", endpoint,
                          " presented a certificate that --rdzv-tls-ca does not verify (signed by "
                          "another CA, or not issued for this address)");
    case ConnectFailure::kTlsHandshake:
      return absl::StrCat("the TLS handshake with the rendezvous service at ", endpoint,
                          " failed (does it serve TLS, with --tls-cert and --tls-key? with "
                          "--tls-client-ca it also needs --rdzv-tls-cert and --rdzv-tls-key)");
    case ConnectFailure::kClosedPlaintext:
      return absl::StrCat("the rendezvous service at ", endpoint,
                          " closed the connection during the handshake: if it serves TLS, pass "
                          "--rdzv-tls-ca (and --rdzv-tls-cert and --rdzv-tls-key for mutual TLS)");
    case ConnectFailure::kUnreachable:
      break;
  }
  return absl::StrCat("cannot reach the rendezvous service at ", endpoint, " within ",
                      absl::FormatDuration(timeout),
                      " (is dgt-rendezvous running there? see --rdzv-connect-timeout)");
}

}  // namespace dgt::agent
