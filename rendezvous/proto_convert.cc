#include "rendezvous/proto_convert.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dgt::rendezvous {
namespace {

// NaN reads as zero: the service has always taken a NaN timeout for "not set".
absl::Duration DurationFromSeconds(double s) {
  return std::isnan(s) ? absl::ZeroDuration() : absl::Seconds(s);
}
double SecondsOf(absl::Duration d) { return absl::ToDoubleSeconds(d); }

absl::Time TimeFromUnixSeconds(double s) { return absl::UnixEpoch() + DurationFromSeconds(s); }
double UnixSecondsOf(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

Assignment FromProto(const v1::Assignment& proto) {
  Assignment a;
  a.run_id = proto.run_id();
  a.round = proto.round();
  a.node_rank = proto.node_rank();
  a.node_count = proto.node_count();
  a.world_size = proto.world_size();
  a.first_global_rank = proto.first_global_rank();
  a.master_addr = proto.master_addr();
  a.master_port = proto.master_port();
  a.restart_count = proto.restart_count();
  a.reason = proto.reason();
  a.host_node_id = proto.host_node_id();
  a.in_place = proto.in_place();
  return a;
}

v1::Assignment ToProto(const Assignment& assignment) {
  v1::Assignment p;
  p.set_run_id(assignment.run_id);
  p.set_round(assignment.round);
  p.set_node_rank(assignment.node_rank);
  p.set_node_count(assignment.node_count);
  p.set_world_size(assignment.world_size);
  p.set_first_global_rank(assignment.first_global_rank);
  p.set_master_addr(assignment.master_addr);
  p.set_master_port(assignment.master_port);
  p.set_restart_count(assignment.restart_count);
  p.set_reason(assignment.reason);
  p.set_host_node_id(assignment.host_node_id);
  p.set_in_place(assignment.in_place);
  return p;
}

JoinRequest FromProto(const v1::JoinRequest& proto) {
  JoinRequest j;
  j.run_id = proto.run_id();
  j.node_id = proto.node_id();
  j.min_nodes = proto.min_nodes();
  j.max_nodes = proto.max_nodes();
  j.nproc_per_node = proto.nproc_per_node();
  j.address = proto.address();
  j.store_port = proto.store_port();
  j.last_call_timeout = DurationFromSeconds(proto.last_call_timeout_s());
  j.max_restarts = proto.max_restarts();
  j.join_timeout = DurationFromSeconds(proto.join_timeout_s());
  j.spare_nodes = proto.spare_nodes();
  j.in_place_spares = proto.in_place_spares();
  if (proto.has_rejoin()) j.rejoin = FromProto(proto.rejoin());
  return j;
}

v1::JoinRequest ToProto(const JoinRequest& join) {
  v1::JoinRequest p;
  p.set_run_id(join.run_id);
  p.set_node_id(join.node_id);
  p.set_min_nodes(join.min_nodes);
  p.set_max_nodes(join.max_nodes);
  p.set_nproc_per_node(join.nproc_per_node);
  p.set_address(join.address);
  p.set_store_port(join.store_port);
  p.set_last_call_timeout_s(SecondsOf(join.last_call_timeout));
  p.set_max_restarts(join.max_restarts);
  p.set_join_timeout_s(SecondsOf(join.join_timeout));
  p.set_spare_nodes(join.spare_nodes);
  p.set_in_place_spares(join.in_place_spares);
  if (join.rejoin) *p.mutable_rejoin() = ToProto(*join.rejoin);
  return p;
}

WorkerFailure FromProto(const v1::WorkerFailure& proto) {
  WorkerFailure f;
  f.rank = proto.rank();
  f.local_rank = proto.local_rank();
  f.exit_code = proto.exit_code();
  f.signal = proto.signal();
  f.node_id = proto.node_id();
  f.time = TimeFromUnixSeconds(proto.time_unix_s());
  return f;
}

v1::WorkerFailure ToProto(const WorkerFailure& failure) {
  v1::WorkerFailure p;
  p.set_rank(failure.rank);
  p.set_local_rank(failure.local_rank);
  p.set_exit_code(failure.exit_code);
  p.set_signal(failure.signal);
  p.set_node_id(failure.node_id);
  p.set_time_unix_s(UnixSecondsOf(failure.time));
  return p;
}

NodeReport FromProto(const v1::NodeReport& proto) {
  NodeReport r;
  r.round = proto.round();
  r.succeeded = proto.succeeded();
  if (proto.has_failure()) r.failure = FromProto(proto.failure());
  r.message = proto.message();
  return r;
}

v1::NodeReport ToProto(const NodeReport& report) {
  v1::NodeReport p;
  p.set_round(report.round);
  p.set_succeeded(report.succeeded);
  if (report.failure) *p.mutable_failure() = ToProto(*report.failure);
  p.set_message(report.message);
  return p;
}

StoreReady FromProto(const v1::StoreReady& proto) { return StoreReady{proto.store_port()}; }

v1::StoreReady ToProto(const StoreReady& ready) {
  v1::StoreReady p;
  p.set_store_port(ready.store_port);
  return p;
}

JoinProgress FromProto(const v1::JoinProgress& proto) {
  return JoinProgress{proto.joined_nodes(), proto.min_nodes(), proto.max_nodes(), proto.spare()};
}

v1::JoinProgress ToProto(const JoinProgress& progress) {
  v1::JoinProgress p;
  p.set_joined_nodes(progress.joined_nodes);
  p.set_min_nodes(progress.min_nodes);
  p.set_max_nodes(progress.max_nodes);
  p.set_spare(progress.spare);
  return p;
}

StopWorkers FromProto(const v1::StopWorkers& proto) {
  return StopWorkers{proto.round(), proto.reason()};
}

v1::StopWorkers ToProto(const StopWorkers& stop) {
  v1::StopWorkers p;
  p.set_round(stop.round);
  p.set_reason(stop.reason);
  return p;
}

RunFinished FromProto(const v1::RunFinished& proto) {
  RunFinished f;
  f.succeeded = proto.succeeded();
  f.message = proto.message();
  if (proto.has_failure()) f.failure = FromProto(proto.failure());
  f.too_few_nodes = proto.too_few_nodes();
  return f;
}

v1::RunFinished ToProto(const RunFinished& finished) {
  v1::RunFinished p;
  p.set_succeeded(finished.succeeded);
  p.set_message(finished.message);
  if (finished.failure) *p.mutable_failure() = ToProto(*finished.failure);
  p.set_too_few_nodes(finished.too_few_nodes);
  return p;
}

Refusal FromProto(const v1::Error& proto) {
  // absl::Status maps a code it does not know to kUnknown.
  return Refusal{absl::Status(static_cast<absl::StatusCode>(proto.code()), proto.message())};
}

v1::Error ToProto(const Refusal& refusal) {
  v1::Error p;
  p.set_code(static_cast<int>(refusal.status.code()));
  p.set_message(std::string(refusal.status.message()));
  return p;
}

absl::StatusOr<AgentMessage> FromProto(const v1::AgentMessage& proto) {
  switch (proto.kind_case()) {
    case v1::AgentMessage::kJoin:
      return AgentMessage(FromProto(proto.join()));
    case v1::AgentMessage::kReport:
      return AgentMessage(FromProto(proto.report()));
    case v1::AgentMessage::kStoreReady:
      return AgentMessage(FromProto(proto.store_ready()));
    case v1::AgentMessage::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty AgentMessage");
}

v1::AgentMessage ToProto(const AgentMessage& message) {
  v1::AgentMessage p;
  if (const auto* join = std::get_if<JoinRequest>(&message)) {
    *p.mutable_join() = ToProto(*join);
  } else if (const auto* report = std::get_if<NodeReport>(&message)) {
    *p.mutable_report() = ToProto(*report);
  } else if (const auto* ready = std::get_if<StoreReady>(&message)) {
    *p.mutable_store_ready() = ToProto(*ready);
  }
  return p;
}

absl::StatusOr<ServiceMessage> FromProto(const v1::ServiceMessage& proto) {
  switch (proto.kind_case()) {
    case v1::ServiceMessage::kProgress:
      return ServiceMessage(FromProto(proto.progress()));
    case v1::ServiceMessage::kAssignment:
      return ServiceMessage(FromProto(proto.assignment()));
    case v1::ServiceMessage::kFinished:
      return ServiceMessage(FromProto(proto.finished()));
    case v1::ServiceMessage::kError:
      return ServiceMessage(FromProto(proto.error()));
    case v1::ServiceMessage::kStop:
      return ServiceMessage(FromProto(proto.stop()));
    case v1::ServiceMessage::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty ServiceMessage");
}

v1::ServiceMessage ToProto(const ServiceMessage& message) {
  v1::ServiceMessage p;
  if (const auto* progress = std::get_if<JoinProgress>(&message)) {
    *p.mutable_progress() = ToProto(*progress);
  } else if (const auto* assignment = std::get_if<Assignment>(&message)) {
    *p.mutable_assignment() = ToProto(*assignment);
  } else if (const auto* finished = std::get_if<RunFinished>(&message)) {
    *p.mutable_finished() = ToProto(*finished);
  } else if (const auto* refusal = std::get_if<Refusal>(&message)) {
    *p.mutable_error() = ToProto(*refusal);
  } else if (const auto* stop = std::get_if<StopWorkers>(&message)) {
    *p.mutable_stop() = ToProto(*stop);
  }
  return p;
}

NodeStatus FromProto(const v1::NodeStatus& proto) {
  return NodeStatus{proto.node_id(),
                    proto.address(),
                    proto.node_rank(),
                    proto.nproc_per_node(),
                    TimeFromUnixSeconds(proto.last_contact_unix_s()),
                    proto.succeeded()};
}

v1::NodeStatus ToProto(const NodeStatus& status) {
  v1::NodeStatus p;
  p.set_node_id(status.node_id);
  p.set_address(status.address);
  p.set_node_rank(status.node_rank);
  p.set_nproc_per_node(status.nproc_per_node);
  p.set_last_contact_unix_s(UnixSecondsOf(status.last_contact));
  p.set_succeeded(status.succeeded);
  return p;
}

absl::StatusOr<RunStatus> FromProto(const v1::RunStatus& proto) {
  RunStatus s;
  bool known = false;
  for (RunState state : {RunState::kGathering, RunState::kRunning, RunState::kClosed}) {
    if (proto.state() == RunStateName(state)) {
      s.state = state;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat("run '", proto.run_id(), "' has state '",
                                                   proto.state(),
                                                   "'; expected gathering, running or closed"));
  }
  s.run_id = proto.run_id();
  s.round = proto.round();
  s.restart_count = proto.restart_count();
  s.min_nodes = proto.min_nodes();
  s.max_nodes = proto.max_nodes();
  s.world_size = proto.world_size();
  s.nodes.reserve(proto.nodes_size());
  for (const v1::NodeStatus& n : proto.nodes()) s.nodes.push_back(FromProto(n));
  s.outcome = proto.outcome();
  s.master_addr = proto.master_addr();
  s.master_port = proto.master_port();
  return s;
}

v1::RunStatus ToProto(const RunStatus& status) {
  v1::RunStatus p;
  p.set_run_id(status.run_id);
  p.set_state(RunStateName(status.state));
  p.set_round(status.round);
  p.set_restart_count(status.restart_count);
  p.set_min_nodes(status.min_nodes);
  p.set_max_nodes(status.max_nodes);
  p.set_world_size(status.world_size);
  for (const NodeStatus& n : status.nodes) *p.add_nodes() = ToProto(n);
  p.set_outcome(status.outcome);
  p.set_master_addr(status.master_addr);
  p.set_master_port(status.master_port);
  return p;
}

v1::GetStatusResponse ToProto(const std::vector<RunStatus>& runs) {
  v1::GetStatusResponse p;
  for (const RunStatus& run : runs) *p.add_runs() = ToProto(run);
  return p;
}

}  // namespace dgt::rendezvous
