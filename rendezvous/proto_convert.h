// The one place where the rendezvous domain types (types.h) meet the v1 wire messages
// (proto/dgt/rendezvous/v1/rendezvous.proto). The service (service.cc) converts what it reads
// and writes here, and so do clients through client.h; the round state machine never sees a
// proto. The conversions keep the v1 wire messages unchanged, so agents of this and older
// versions talk to the service alike.
//
// Field by field:
// - Durations and times travel as double seconds (since the Unix epoch for times). A NaN
//   duration from the wire reads as zero (the service default).
// - An optional message field (JoinRequest.rejoin, NodeReport.failure, RunFinished.failure) is
//   present on the wire exactly when the optional holds a value.
// - v1.Error.code is the google.rpc.Code of the Refusal's absl::Status (the same numbers). A code
//   outside 1..16 reads as kUnknown.
// - RunStatus.state is RunStateName's text.
//
// Stateless free functions: thread-safe.
#ifndef DGT_RENDEZVOUS_PROTO_CONVERT_H_
#define DGT_RENDEZVOUS_PROTO_CONVERT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "dgt/rendezvous/v1/rendezvous.pb.h"
#include "rendezvous/types.h"

namespace dgt::rendezvous {

Assignment FromProto(const v1::Assignment& proto);
v1::Assignment ToProto(const Assignment& assignment);

JoinRequest FromProto(const v1::JoinRequest& proto);
v1::JoinRequest ToProto(const JoinRequest& join);

WorkerFailure FromProto(const v1::WorkerFailure& proto);
v1::WorkerFailure ToProto(const WorkerFailure& failure);

NodeReport FromProto(const v1::NodeReport& proto);
v1::NodeReport ToProto(const NodeReport& report);

StoreReady FromProto(const v1::StoreReady& proto);
v1::StoreReady ToProto(const StoreReady& ready);

JoinProgress FromProto(const v1::JoinProgress& proto);
v1::JoinProgress ToProto(const JoinProgress& progress);

StopWorkers FromProto(const v1::StopWorkers& proto);
v1::StopWorkers ToProto(const StopWorkers& stop);

RunFinished FromProto(const v1::RunFinished& proto);
v1::RunFinished ToProto(const RunFinished& finished);

Refusal FromProto(const v1::Error& proto);
v1::Error ToProto(const Refusal& refusal);

// Errors: InvalidArgument "empty AgentMessage" when no kind is set (the service refuses such a
// message with that text).
absl::StatusOr<AgentMessage> FromProto(const v1::AgentMessage& proto);
v1::AgentMessage ToProto(const AgentMessage& message);

// Errors: InvalidArgument "empty ServiceMessage" when no kind is set.
absl::StatusOr<ServiceMessage> FromProto(const v1::ServiceMessage& proto);
v1::ServiceMessage ToProto(const ServiceMessage& message);

// Errors: InvalidArgument naming the state when RunStatus.state is not a RunStateName.
absl::StatusOr<RunStatus> FromProto(const v1::RunStatus& proto);
v1::RunStatus ToProto(const RunStatus& status);

NodeStatus FromProto(const v1::NodeStatus& proto);
v1::NodeStatus ToProto(const NodeStatus& status);

// The GetStatus answer for `runs` (RoundStateMachine::Status).
v1::GetStatusResponse ToProto(const std::vector<RunStatus>& runs);

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_PROTO_CONVERT_H_
