// Internal to coord/static_coordinator*.cc: the timeouts and the message helper both of its
// source files use. Not a public header.
#ifndef DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_
#define DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace dgt::agent::static_coordinator_internal {

// Each request's deadline (a few bytes to a store on the job's network); the WAITs have their
// own. One that passes breaks that connection, as the store then stopped answering.
inline constexpr absl::Duration kRequestTimeout = absl::Seconds(30);

// How long node rank 0 may take to find out which nodes are missing, after the finish timeout.
inline constexpr absl::Duration kProbeTimeout = absl::Seconds(5);

// Beyond reconnect_timeout: how long a reconnect to node rank 0's store may hang.
inline constexpr absl::Duration kReconnectBackstop = absl::Seconds(2);

// "node rank 1" / "node ranks 1, 2".
inline std::string NodeRanks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "node rank " : "node ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace dgt::agent::static_coordinator_internal

#endif  // DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_
