// Why an agent could not open its channel to the rendezvous service, told apart from gRPC's
// last transport error: nothing listening (the service is down or elsewhere) reads very
// differently from a TLS handshake the service and the agent disagree on.
#ifndef DGT_AGENT_COORD_CONNECT_FAILURE_H_
#define DGT_AGENT_COORD_CONNECT_FAILURE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt::agent {

enum class ConnectFailure {
  kUnreachable,     // Refused, no route, no answer: nothing serves the endpoint (or a firewall).
  kCertificate,     // TLS on: the service's certificate does not verify with --rdzv-tls-ca.
  kTlsHandshake,    // TLS on: the handshake failed otherwise (a plaintext service, mutual TLS).
  kClosedPlaintext  // TLS off: something accepted and hung up, as a TLS-only service does.
};

// Classifies `grpc_error`, the message of a failed RPC on a channel that never connected (its
// last transport error, e.g. "failed to connect to all addresses; last error: UNKNOWN:
// ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused"). `tls`: whether the
// agent used TLS (--rdzv-tls-ca).
ConnectFailure ClassifyConnectFailure(absl::string_view grpc_error, bool tls);

// The one-line error for a channel to `endpoint` that did not connect within `timeout`, naming
// the flags that fix it.
std::string DescribeConnectFailure(absl::string_view endpoint, absl::Duration timeout,
                                   absl::string_view grpc_error, bool tls);

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_CONNECT_FAILURE_H_
