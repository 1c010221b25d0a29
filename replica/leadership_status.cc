#include "replica/leadership_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dgt::replica {

grpc::Status StandbyStatus(absl::string_view replica_id, absl::string_view leader_address) {
  v1::NotLeader not_leader;
  not_leader.set_replica_id(std::string(replica_id));
  not_leader.set_leader_address(std::string(leader_address));
  const std::string message =
      absl::StrCat("dgt-rendezvous replica ", replica_id, " is a standby; ",
                   leader_address.empty() ? std::string("no leader now")
                                          : absl::StrCat("the leader is ", leader_address));
  v1::StatusDetails details;
  details.set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  details.set_message(message);
  details.add_details()->PackFrom(not_leader);
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, message, details.SerializeAsString());
}

std::optional<v1::NotLeader> StandbyAnswer(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE || status.error_details().empty()) {
    return std::nullopt;
  }
  v1::StatusDetails details;
  if (!details.ParseFromString(status.error_details())) return std::nullopt;
  for (const google::protobuf::Any& any : details.details()) {
    v1::NotLeader not_leader;
    if (any.UnpackTo(&not_leader)) return not_leader;
  }
  return std::nullopt;
}

}  // namespace dgt::replica
