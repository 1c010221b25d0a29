// Parsing and formatting of "host:port" endpoints (IPv6 literals as "[addr]:port"), and the
// local address that routes to a remote host. Thread-compatible free functions.
#ifndef DGT_COMMON_HOST_PORT_H_
#define DGT_COMMON_HOST_PORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt {

struct HostPort {
  std::string host;  // Without brackets, e.g. "::1" or "10.0.0.1" or "node-0".
  uint16_t port = 0;
};

// Parses "host", "host:port", "[v6]" or "[v6]:port" (as torchrun's --rdzv-endpoint). A missing
// port becomes `default_port`; pass -1 to make the port required.
// Errors: InvalidArgument naming `what` and the text, e.g.
//   "--rdzv-endpoint: port must be 1..65535, got 'host:99999'".
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       absl::string_view what);

// As ParseHostPort, but port 0 is accepted too: torchrun 2.x's "--rdzv-endpoint HOST:0" (a free
// port, for a single node).
absl::StatusOr<HostPort> ParseHostPortOrFree(absl::string_view text, int default_port,
                                             absl::string_view what);

// As ParseHostPort for an address to listen on: the port is required and may be 0 (any free).
absl::StatusOr<HostPort> ParseListenAddress(absl::string_view text, absl::string_view what);

// "host:port", or "[host]:port" when host contains ':'.
std::string FormatHostPort(absl::string_view host, uint16_t port);

// Resolves `host` (a name or a literal) to one numeric IP address, preferring IPv4.
// Errors: Unavailable when the name does not resolve.
absl::StatusOr<std::string> ResolveToIp(absl::string_view host);

// The local IP address of the interface the kernel routes to `remote_ip` through (a UDP
// connect(), which sends nothing). This is the address other nodes can reach us at.
// Errors: Unavailable when there is no route.
absl::StatusOr<std::string> RoutedLocalAddress(absl::string_view remote_ip);

// Ok when this host owns the IP address `ip` (a socket can bind to it), as an address to
// advertise to other nodes must be.
// Errors: InvalidArgument when `ip` is not an IP literal or no interface here has it
// (EADDRNOTAVAIL), e.g. "192.0.2.7 is not an address of this host"; others as errno says.
absl::Status CheckLocalAddress(absl::string_view ip);

// True for 127.0.0.0/8 and ::1.
bool IsLoopback(absl::string_view ip);

}  // namespace dgt

#endif  // DGT_COMMON_HOST_PORT_H_
