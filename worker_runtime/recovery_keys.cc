#include "dgt/worker/recovery_keys.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dgt::worker::recovery {
namespace {

std::string Base(absl::string_view group) { return absl::StrCat("dgt/recovery/", group, "/"); }

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

std::string GenerationKey(absl::string_view group) { return Base(group) + "generation"; }
std::string OpenKey(absl::string_view group, int generation) {
  return absl::StrCat(Base(group), "g", generation, "/open");
}
std::string FailedKey(absl::string_view group, int generation) {
  return absl::StrCat(Base(group), "g", generation, "/failed");
}
std::string AliveKey(absl::string_view group, int generation, int rank) {
  return absl::StrCat(Base(group), "g", generation, "/alive/", rank);
}
std::string MemberKey(absl::string_view group, int rank) {
  return absl::StrCat(Base(group), "member/", rank);
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
