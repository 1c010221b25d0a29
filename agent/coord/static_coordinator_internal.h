// Internal to coord/static_coordinator*.cc: the timeouts and the message helper both of its
// source files use. Not a public header.
#ifndef DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_
#define DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt::agent::static_coordinator_internal {

// Each request's deadline (a few bytes to a store on the job's network); the WAITs have their
// own. One that passes breaks that connection, as the store then stopped answering.
inline constexpr absl::Duration kRequestTimeout = absl::Seconds(30);

// How long node rank 0 may take to find out which nodes are missing, after the finish timeout.
inline constexpr absl::Duration kProbeTimeout = absl::Seconds(5);

// Beyond reconnect_timeout: how long a reconnect to node rank 0's store may hang.
inline constexpr absl::Duration kReconnectBackstop = absl::Seconds(2);
// How long a node holds another node's stop by an outside signal before it stops its own workers
// for it: its own signal, if the stop was a cancel of every node, comes first.
inline constexpr absl::Duration kStoppedPeerGrace = absl::Milliseconds(500);
// ReportStopped's failure text is "node rank N" then this, then the signal's name: how the other
// nodes tell a stop by an outside signal from a failure (StoppedBySignal).
inline constexpr char kStoppedByText[] = " was stopped by SIG";
// Whether a failure text (the failed key's value after its exit status) is ReportStopped's.
inline bool StoppedBySignal(absl::string_view message) {
  return absl::StartsWith(message, "node rank ") && absl::StrContains(message, kStoppedByText);
}

// "node rank 1" / "node ranks 1, 2".
inline std::string NodeRanks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "node rank " : "node ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace dgt::agent::static_coordinator_internal

#endif  // DGT_AGENT_COORD_STATIC_COORDINATOR_INTERNAL_H_
