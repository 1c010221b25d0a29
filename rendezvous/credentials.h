// Transport security for the rendezvous service and its clients: TLS and mutual TLS from PEM
// files, and an optional shared bearer token carried as "authorization: Bearer <token>".
// Thread-compatible free functions.
#ifndef DGT_RENDEZVOUS_CREDENTIALS_H_
#define DGT_RENDEZVOUS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/bearer_token.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace dgt::rendezvous {

// PEM file paths. Server: cert + key turn TLS on; ca additionally requires and verifies client
// certificates (mutual TLS). Client: ca turns TLS on (verifies the service); cert + key present a
// client certificate. All empty: plaintext.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;

  bool empty() const { return cert_file.empty() && key_file.empty() && ca_file.empty(); }
};

// Errors: InvalidArgument when only one of cert/key is given or a file cannot be read (naming
// the flag and path).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls);

// What MakeChannelCredentials checks, without gRPC, for a client's flags (dgt-run checks them
// while parsing, so that a wrong file is a usage error and not a connect timeout): cert and key
// given together, every file readable, the CA file and the certificate hold a PEM certificate,
// the key file the certificate's PEM private key.
// Errors: InvalidArgument naming the --rdzv-tls-* flag and the path.
absl::Status CheckClientTlsFiles(const TlsFiles& tls);

// Reads a token file (surrounding whitespace trimmed).
// Errors: InvalidArgument for an unreadable file (with the errno text), a directory, a file over
// 1 MiB, or an empty file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Sends gRPC's own log lines (e.g. "E1201 ... ssl_transport_security.cc:1501] Handshake failed
// ...", once per reconnect attempt) to spdlog at debug level: a client reports the failure in
// one line of its own. Call once at startup, before any channel exists.
void RouteGrpcLogsToDebug();

// The bearer token's metadata (kAuthorizationKey, BearerValue, TokenMatches) is
// common/bearer_token.h's, included here for the clients.

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_CREDENTIALS_H_
