// The endpoint list of one replicated service ("a:29400,b:29400,[::1]:29401": dgt-run's and
// dgt's --rdzv-endpoint, dgt-agent's rendezvous_endpoints): parsing with the duplicate check,
// the same-replica check once names are resolved, and which listed endpoint a standby's leader is.
//
// Thread-safe (pure functions; the resolver is the caller's).
#ifndef DGT_REPLICA_ENDPOINT_LIST_H_
#define DGT_REPLICA_ENDPOINT_LIST_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_port.h"

namespace dgt::replica {

// Parses a comma-separated list of endpoints: each item as ParseHostPort (ports 1..65535; a
// missing port becomes `default_port`, -1 makes it required), blanks around an item ignored.
// Returns the items in the given order (at least one).
// Errors: InvalidArgument naming `what`, the bad item and the list, e.g.
//   "--rdzv-endpoint: port must be 1..65535, got 'b:x' (item 2 of 'a:29400,b:x')",
//   "--rdzv-endpoint: empty item 2 in 'a:29400,,b:29400'",
//   "--rdzv-endpoint: 'a:29400' is listed twice in 'a:29400,b,a'" (same host, any case, and
//   port once the default port is applied).
absl::StatusOr<std::vector<HostPort>> ParseEndpointList(absl::string_view text, int default_port,
                                                        absl::string_view what);

// Resolves a host name or literal to one IP address (common/host_port.h ResolveToIp by default).
using Resolver = std::function<absl::StatusOr<std::string>(absl::string_view host)>;

// Two items of one list that name one replica under different names ("localhost:1" and
// "127.0.0.1:1"): items `first` < `second`, both `address` ("ip:port") once resolved.
struct SameReplica {
  size_t first = 0;
  size_t second = 0;
  std::string address;
};

// The first pair of `list`'s items that resolve to one address, if any. An item whose name does
// not resolve is not compared; a list of one item is not resolved.
std::optional<SameReplica> FindSameReplica(const std::vector<HostPort>& list,
                                           const Resolver& resolve = ResolveToIp);

// True when "host:port" `a` and `b` name one endpoint: the same host in any case and port, or the
// same address once resolved. False when either does not parse.
bool SameEndpoint(absl::string_view a, absl::string_view b, const Resolver& resolve = ResolveToIp);

// Leader redirect: the index in `endpoints` of the leader that the standby at `standby` named
// (NotLeader.leader_address), so that it is tried next. nullopt when `leader` is empty or no
// endpoint but `standby` itself is the leader (SameEndpoint).
std::optional<size_t> LeaderIndex(const std::vector<std::string>& endpoints,
                                  absl::string_view standby, absl::string_view leader,
                                  const Resolver& resolve = ResolveToIp);

}  // namespace dgt::replica

#endif  // DGT_REPLICA_ENDPOINT_LIST_H_
