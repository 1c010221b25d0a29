#include "dgt/worker/recovery_keys.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/store_keys.h"

namespace dgt::worker::recovery {
namespace {

// COMPARE_SET from -> from+1; returns the generation to use from now on.
absl::StatusOr<int> Advance(store::Store& store, absl::string_view group, int from) {
  const std::string key = GenerationKey(group);
  // Make sure the counter exists ("0"), so COMPARE_SET below has something to compare.
  DGT_ASSIGN_OR_RETURN(std::string current, store.CompareSet(key, "", "0"));
  DGT_ASSIGN_OR_RETURN(current, store.CompareSet(key, absl::StrCat(from), absl::StrCat(from + 1)));
  int now = 0;
  if (!absl::SimpleAtoi(current, &now)) {
    return absl::InternalError(
        absl::StrCat("store key ", key, " holds '", current, "', not a generation number"));
  }
  return std::max(now, from + 1);
}

}  // namespace

// The shapes are common/store_keys.h's (the one place that defines dgt's keys).
std::string GenerationKey(absl::string_view group) { return keys::RecoveryGenerationKey(group); }
std::string OpenKey(absl::string_view group, int generation) {
  return keys::RecoveryOpenKey(group, generation);
}
std::string FailedKey(absl::string_view group, int generation) {
  return keys::RecoveryFailedKey(group, generation);
}
std::string AliveKey(absl::string_view group, int generation, int rank) {
  return keys::RecoveryAliveKey(group, generation, rank);
}
std::string MemberKey(absl::string_view group, int rank) {
  return keys::RecoveryMemberKey(group, rank);
}

absl::StatusOr<int> OpenNextGeneration(store::Store& store, absl::string_view group, int from,
                                       absl::string_view reason) {
  DGT_ASSIGN_OR_RETURN(int target, Advance(store, group, from));
  DGT_RETURN_IF_ERROR(store.Set(OpenKey(group, target), reason));
  return target;
}

absl::StatusOr<int> PublishRankFailure(store::Store& store, absl::string_view group, int rank,
                                       absl::string_view reason) {
  int from = 0;
  DGT_ASSIGN_OR_RETURN(bool known, store.Check({MemberKey(group, rank)}));
  if (known) {
    DGT_ASSIGN_OR_RETURN(std::string v, store.Get(MemberKey(group, rank)));
    if (!absl::SimpleAtoi(v, &from)) {
      return absl::InternalError(absl::StrCat("store key ", MemberKey(group, rank), " holds '", v,
                                              "', not a generation number"));
    }
  }
  DGT_ASSIGN_OR_RETURN(int target, Advance(store, group, from));
  // The failed list first, so a survivor that sees the opening finds the report with it.
  DGT_RETURN_IF_ERROR(store.Append(FailedKey(group, target), absl::StrCat(rank, ",")));
  DGT_RETURN_IF_ERROR(store.Set(OpenKey(group, target), reason));
  return target;
}

}  // namespace dgt::worker::recovery
