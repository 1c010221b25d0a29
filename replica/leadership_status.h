// The leadership signal of replicated dgt-rendezvous services on the wire
// (proto/dgt/replica/v1/leadership.proto): a standby's answer, written by the servers with
// StandbyStatus and read by the clients with StandbyAnswer. No code parses the message text.
//
// Thread-safe (pure functions).
#ifndef DGT_REPLICA_LEADERSHIP_STATUS_H_
#define DGT_REPLICA_LEADERSHIP_STATUS_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "dgt/replica/v1/leadership.pb.h"
#include "grpcpp/support/status.h"

namespace dgt::replica {

// A standby's answer to a call it does not serve. Returns UNAVAILABLE with the message
// "dgt-rendezvous replica <replica_id> is a standby; the leader is <leader_address>" ("...; no
// leader now" when leader_address is empty) and a NotLeader{replica_id, leader_address} in the
// binary error details.
grpc::Status StandbyStatus(absl::string_view replica_id, absl::string_view leader_address);

// The NotLeader a standby sent in `status`. Returns nullopt for any other status: OK, another
// code, or UNAVAILABLE without a NotLeader (an unreachable or stopping replica).
std::optional<v1::NotLeader> StandbyAnswer(const grpc::Status& status);

}  // namespace dgt::replica

#endif  // DGT_REPLICA_LEADERSHIP_STATUS_H_
