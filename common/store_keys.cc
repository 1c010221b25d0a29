#include "common/store_keys.h"

#include "absl/strings/str_cat.h"

namespace dgt::keys {
namespace {

std::string StaticBase(absl::string_view run_id) {
  return absl::StrCat("dgt/static/", run_id, "/");
}

std::string RecoveryBase(absl::string_view group) {
  return absl::StrCat("dgt/recovery/", group, "/");
}

}  // namespace

std::string StaticFailedKey(absl::string_view run_id) { return StaticBase(run_id) + "failed"; }
std::string StaticJoinedKey(absl::string_view run_id, int node_rank) {
  return absl::StrCat(StaticBase(run_id), "joined/", node_rank);
}
std::string StaticDoneKey(absl::string_view run_id, int node_rank) {
  return absl::StrCat(StaticBase(run_id), "done/", node_rank);
}
std::string StaticAliveKey(absl::string_view run_id, int node_rank) {
  return absl::StrCat(StaticBase(run_id), "alive/", node_rank);
}

std::string DoneMarkKey(int64_t round, int node_rank) {
  return absl::StrCat("dgt/done/", round, "/", node_rank);
}
std::string DoneSeenKey(int64_t round, int node_rank) {
  return absl::StrCat("dgt/done/", round, "/seen/", node_rank);
}

std::string TfAddressesKey(int64_t round, int node_rank) {
  return absl::StrCat("dgt/tf/", round, "/", node_rank);
}
std::string TfRolesKey(int64_t round, int node_rank) {
  return absl::StrCat(TfAddressesKey(round, node_rank), "/roles");
}

std::string RestartKey(int rank) { return absl::StrCat("dgt/restart/", rank); }
std::string RestartWireKey(int rank) { return absl::StrCat("/", RestartKey(rank)); }

std::string RecoveryGenerationKey(absl::string_view group) {
  return RecoveryBase(group) + "generation";
}
std::string RecoveryOpenKey(absl::string_view group, int generation) {
  return absl::StrCat(RecoveryBase(group), "g", generation, "/open");
}
std::string RecoveryFailedKey(absl::string_view group, int generation) {
  return absl::StrCat(RecoveryBase(group), "g", generation, "/failed");
}
std::string RecoveryAliveKey(absl::string_view group, int generation, int rank) {
  return absl::StrCat(RecoveryBase(group), "g", generation, "/alive/", rank);
}
std::string RecoveryMemberKey(absl::string_view group, int rank) {
  return absl::StrCat(RecoveryBase(group), "member/", rank);
}

std::string CommPrefix(absl::string_view group, int generation) {
  return absl::StrCat("dgt/comm/", group, "/g", generation);
}

}  // namespace dgt::keys
