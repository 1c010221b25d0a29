// The store keys of dgt's in-place recovery protocol (docs/RECOVERY.md), shared by the worker
// runtime (ElasticGroup) and the agent (which publishes rank failures into them).
//
// All keys live under "dgt/recovery/<group>/" in the job's store (group "world" by default):
//   generation          current generation, ASCII decimal (missing = 0); moves only by
//                       COMPARE_SET from G to G+1, so concurrent detectors agree on G+1.
//   g<G>/open           set once generation G is opened (value: why); members of G-1 watch it.
//   g<G>/failed         ranks reported failed when G was opened, appended as "<rank>," each.
//   g<G>/alive/<rank>   a member joining G (shrink mode's fallback when no report comes).
//   member/<rank>       the last generation that rank joined; a replacement reads its
//                       predecessor's value to know which generation it must open.
//
// Thread-safety: the functions are as thread-safe as the store passed in.
#ifndef DGT_WORKER_RECOVERY_KEYS_H_
#define DGT_WORKER_RECOVERY_KEYS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dgt/store/store.h"

namespace dgt::worker::recovery {

std::string GenerationKey(absl::string_view group);
std::string OpenKey(absl::string_view group, int generation);
std::string FailedKey(absl::string_view group, int generation);
std::string AliveKey(absl::string_view group, int generation, int rank);
std::string MemberKey(absl::string_view group, int rank);

// Opens the generation after `from` (COMPARE_SET from -> from+1 on the generation key) and marks
// it open with `reason`. Returns the generation now current if it is beyond `from`+1 (someone
// moved further), else from+1. Idempotent: callers racing from the same `from` all get from+1.
absl::StatusOr<int> OpenNextGeneration(store::Store& store, absl::string_view group, int from,
                                       absl::string_view reason);

// What an agent calls when a worker of rank `rank` died: opens the generation after the one the
// rank last joined and records the rank in its failed list. Returns that generation.
absl::StatusOr<int> PublishRankFailure(store::Store& store, absl::string_view group, int rank,
                                       absl::string_view reason);

}  // namespace dgt::worker::recovery

#endif  // DGT_WORKER_RECOVERY_KEYS_H_
