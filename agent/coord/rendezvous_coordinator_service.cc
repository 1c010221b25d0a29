// RendezvousCoordinator: the service's messages, this node's report and the done marks.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/coord/rendezvous_coordinator.h"
#include "common/logging.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

// Whether `a` is the round `held` (the service's answer to a rejoin), not a new round that merely
// has the same number (a service that started the run over).
bool IsSameRound(const rdzv_v1::Assignment& a, const rdzv_v1::Assignment& held) {
  return a.run_id() == held.run_id() && a.round() == held.round() &&
         a.node_rank() == held.node_rank() && a.node_count() == held.node_count() &&
         a.world_size() == held.world_size() && a.first_global_rank() == held.first_global_rank() &&
         a.master_addr() == held.master_addr() && a.master_port() == held.master_port() &&
         a.restart_count() == held.restart_count();
}

// Whether a Session stream that ended with `status` was refused by the service (a bad token, a
// per-peer session limit, a request it does not accept): joining again would be refused again.
// Anything else (UNAVAILABLE, CANCELLED, ...) means the service went away.
bool IsRefusal(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::UNIMPLEMENTED:
      return true;
    default:
      return false;
  }
}

}  // namespace

void RendezvousCoordinator::Report(const actions::Report& a) {
  rdzv_v1::AgentMessage message;
  rdzv_v1::NodeReport* report = message.mutable_report();
  report->set_round(*node_.round);
  if (a.failure) {
    const WorkerExit& e = *a.failure;
    report->set_succeeded(false);
    report->set_message(
        absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, ") ", e.Describe()));
    rdzv_v1::WorkerFailure* f = report->mutable_failure();
    f->set_rank(e.rank);
    f->set_local_rank(e.local_rank);
    f->set_exit_code(e.exit_code);
    f->set_signal(e.signal);
    // The earliest failure across nodes is the run's root cause (a hung rank's: when declared).
    f->set_time_unix_s(absl::ToDoubleSeconds(e.FailedAt() - absl::UnixEpoch()));
  } else {
    report->set_succeeded(true);
  }
  // The done mark lets node rank 0 keep the round's store until every node is done, and the
  // nodes learn the outcome, even when the service is gone.
  MarkDone(a.exit_status);
  last_report_ = message;
  if (lost()) {
    PollMarks();  // The report goes out after the rejoin.
    return;
  }
  // A failed send means the stream ended: its closed callback starts reconnecting.
  if (policy_.open()) (void)session_->Send(message);
  // Wait for the service's answer: the run's end (node rank 0 keeps serving the store until
  // every node is done), or a new round (a restart after a failure).
}

void RendezvousCoordinator::OnServiceMessage(const rdzv_v1::ServiceMessage& message) {
  // A fresh join after reconnecting is answered: the service is back. (A rejoin's answer is its
  // Assignment, OnRejoined.)
  if (announce_) {
    spdlog::info("{}", *announce_);
    announce_.reset();
  }
  if (!message.has_error()) {
    const SessionPolicy::Answer answer = policy_.OnAnswer(endpoint_);
    if (answer.accepted_now) rotation_.OnAccepted();
    if (!answer.took_over_from.empty()) {
      spdlog::info(
          "dgt-run: the rendezvous replica at {} took this node's session (the one at {} "
          "was lost)",
          endpoint_, answer.took_over_from);
    }
    if (answer.service_back) ServiceBack();
  }
  switch (message.kind_case()) {
    case rdzv_v1::ServiceMessage::kProgress:
      if (policy_.rejoin_round()) OnRejoinTakenAsJoin();
      lifecycle_->OnProgress(message.progress().joined_nodes(), message.progress().spare(),
                             clock_->Now());
      if (message.progress().spare()) {
        if (node_.waiting_as_spare) node_.waiting_as_spare();
        spdlog::info(
            "dgt-run: run '{}': this node waits as a hot spare; it takes the place of the next "
            "node the run loses ({} node(s) connected, --nnodes {}:{})",
            options_.run_id, message.progress().joined_nodes(), message.progress().min_nodes(),
            message.progress().max_nodes());
      } else {
        spdlog::info("dgt-run: run '{}': {} node(s) joined (min {}, max {})", options_.run_id,
                     message.progress().joined_nodes(), message.progress().min_nodes(),
                     message.progress().max_nodes());
      }
      return;
    case rdzv_v1::ServiceMessage::kAssignment:
      OnAssignment(message.assignment());
      return;
    case rdzv_v1::ServiceMessage::kFinished: {
      const rdzv_v1::RunFinished& f = message.finished();
      RunOutcome outcome;
      outcome.succeeded = f.succeeded();
      outcome.message = f.message();
      outcome.has_failure = f.has_failure();
      outcome.failed_node_id = f.failure().node_id();
      outcome.exit_code = f.failure().exit_code();
      outcome.signal = f.failure().signal();
      outcome.too_few_nodes = f.too_few_nodes();
      sink_(lifecycle_->OnRunFinished(outcome));
      return;
    }
    case rdzv_v1::ServiceMessage::kError: {
      // The service closes the stream after an Error: this node is not (or no longer) part of
      // the run, and its workers must not go on running ranks the run may give to another node.
      const bool rejoin = policy_.OnRefused(state());
      if (rejoin) reconnect_timer_.cancel();
      sink_(lifecycle_->OnRefused(message.error().message(), rejoin, node_.alive()));
      return;
    }
    case rdzv_v1::ServiceMessage::kStop:
      sink_(lifecycle_->OnStop(message.stop().reason(), node_.alive(), clock_->Now()));
      return;
    case rdzv_v1::ServiceMessage::KIND_NOT_SET:
      return;
  }
}

void RendezvousCoordinator::OnAssignment(const rdzv_v1::Assignment& a) {
  if (policy_.rejoin_round() &&
      IsSameRound(a, RejoinAssignment().value_or(rdzv_v1::Assignment()))) {
    OnRejoined();  // The service took this node back into its round: nothing restarts.
    return;
  }
  if (policy_.rejoin_round()) OnRejoinTakenAsJoin();  // A new round: the workers restart.
  held_ = a;
  RoundAssignment round;
  round.round = a.round();
  round.restart_count = a.restart_count();
  round.node_rank = a.node_rank();
  round.node_count = a.node_count();
  round.reason = a.reason();
  round.in_place = a.in_place();
  sink_(lifecycle_->OnAssignment(round, node_.alive(), clock_->Now()));
}

RoundMarks::Round RendezvousCoordinator::MarksRound() const {
  return RoundMarks::Round{*node_.round, node_.assignment->node_rank, node_.assignment->node_count,
                           node_.assignment->master_addr, node_.assignment->master_port};
}

void RendezvousCoordinator::MarkDone(int exit_status) {
  marks_.MarkDone(MarksRound(), exit_status);
}

void RendezvousCoordinator::PollMarks() {
  if (state() == NodeState::kDone) return;
  marks_.Poll(MarksRound(), [this] { OnMarks(); });
}

void RendezvousCoordinator::OnMarks() {
  if (!lifecycle_ || state() == NodeState::kDone) return;
  // The decisions are NodeLifecycle::OnMarks's.
  const absl::Time now = clock_->Now();
  sink_(lifecycle_->OnMarks(marks_.View(node_.assignment->node_rank), lost(), now,
                            policy_.LostFor(now)));
}

void RendezvousCoordinator::FinishFromMarks(int exit_status, const std::string& message) {
  if (node_.assignment->node_rank == 0) {
    FinishLinger(exit_status, message, /*wait_for_seen=*/true);
    return;
  }
  // Node rank 0 keeps its store until every node has seen the outcome.
  // Terminate flushes it before the agent exits.
  marks_.MarkSeen(MarksRound());
  Finish(exit_status, message);
}

void RendezvousCoordinator::FinishLinger(int exit_status, const std::string& message,
                                         bool wait_for_seen) {
  if (state() == NodeState::kDone || lifecycle_->lingering()) return;
  // With the service there, the other nodes hear from it (a new round has a new store): only
  // without it do they still depend on this node's store.
  if (!round_store_ || node_.assignment->node_count <= 1 || *node_.round < 0 || !lost()) {
    Finish(exit_status, message);
    return;
  }
  lifecycle_->OnLingerStarted(exit_status, message, wait_for_seen,
                              clock_->Now() + absl::Seconds(options_.reconnect_timeout_s));
  // The outcome is decided: rejoining the service now would only hold this node in a run that
  // the others have left (and stop the polls of the marks the linger waits for).
  reconnect_timer_.cancel();
  spdlog::info(
      "dgt-run: node rank 0 keeps the round's store until every node's workers are done (at "
      "most {} s)",
      options_.reconnect_timeout_s);
  PollMarks();
}

bool RendezvousCoordinator::HostedByAnotherNode() const {
  return !host_node_id_.empty() && host_node_id_ != options_.node_id;
}

std::string RendezvousCoordinator::HostLostMessage(const grpc::Status& status) const {
  return absl::StrCat("lost the rendezvous service at ", endpoint_, " hosted by node '",
                      host_node_id_, "' (c10d-style), so that node is gone",
                      status.error_message().empty() ? "" : ": ", status.error_message());
}

void RendezvousCoordinator::OnSessionClosed(const grpc::Status& status) {
  policy_.OnClosed();
  closed_status_ = status;
  SessionEnd end;
  end.refused = IsRefusal(status);
  end.error = status.error_message();
  if (HostedByAnotherNode()) end.host_lost = HostLostMessage(status);
  end.lingering = lifecycle_->lingering();
  sink_(lifecycle_->OnSessionClosed(end, node_.alive()));
}

void RendezvousCoordinator::OnApplied(const rdzv_v1::Assignment& a,
                                      std::unique_ptr<store::Server> store, int next_store_port) {
  current_assignment_ = a;
  host_node_id_ = a.host_node_id();
  if (store) round_store_ = std::move(store);
  if (next_store_port != 0 && policy_.open()) {
    rdzv_v1::AgentMessage ready;
    ready.mutable_store_ready()->set_store_port(next_store_port);
    (void)session_->Send(ready);
  }
}

void RendezvousCoordinator::ReleaseRoundStore() {
  if (round_store_) {
    round_store_->Stop();
    round_store_.reset();
  }
}

void RendezvousCoordinator::PollMarksLater() {
  marks_.PollLater([this] { PollMarks(); });
}

void RendezvousCoordinator::Retire() {
  // With the service there, every node hears the outcome from it: marks still pending would only
  // make this agent wait for a store that may be gone already.
  if (!lost() && !lifecycle_->lingering()) marks_.Drop();
  reconnect_timer_.cancel();
  marks_.CancelPollLater();
  policy_.Retire();  // The session's late callbacks are dropped.
}

void RendezvousCoordinator::Leave() {
  reconnect_timer_.cancel();
  policy_.Retire();  // The closed session's callback is dropped: no reconnect.
  // Kept (closed): a later Send fails quietly, Shutdown closes it again (a no-op).
  if (session_) session_->Close();
}

void RendezvousCoordinator::FlushThen(const std::function<void()>& stop) {
  marks_.FlushThen([this, stop] {
    marks_.CancelFlush();
    stop();
  });
}

}  // namespace dgt::agent
