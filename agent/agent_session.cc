#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/agent.h"
#include "agent/coord/rendezvous_host.h"
#include "agent/exit_codes.h"
#include "agent/workers/log_dir.h"
#include "agent/workers/log_line_prefix.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/store_keys.h"
#include "dgt/worker/net_discovery.h"
#include "replica/leadership_status.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

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

// Whether a Session stream ended with a standby replica's answer (the HA contract).
bool IsStandbyAnswer(const grpc::Status& status) {
  return replica::StandbyAnswer(status).has_value();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousSession>> Agent::OpenSession(uint64_t gen,
                                                                      const std::string& endpoint,
                                                                      absl::Duration timeout) {
  return RendezvousSession::Open(
      endpoint, timeout, rendezvous::ClientOptions::WithCredentials(rdzv_tls_, rdzv_token_),
      [this, gen](const rdzv_v1::ServiceMessage& m) {
        asio::post(io_, [this, gen, m] {
          if (session_policy_.IsCurrent(gen)) OnServiceMessage(m);
        });
      },
      [this, gen](const grpc::Status& status) {
        asio::post(io_, [this, gen, status] {
          if (session_policy_.IsCurrent(gen)) OnSessionClosed(status);
        });
      },
      /*fail_fast=*/rotation_->several());
}

absl::StatusOr<std::unique_ptr<RendezvousSession>> Agent::OpenFirstReplica(absl::Duration timeout) {
  // Before the loop runs (Prepare): blocking is fine, and real time is what gRPC waits in.
  const absl::Time deadline = absl::Now() + timeout;
  bool all_tls = true;  // Every failure was a TLS disagreement (not admitted, exit 77).
  std::string telling;  // The last failure that is not "nothing there".
  // Each attempt takes at least a connect or a pause, and at most 1 s: bounded by `deadline`.
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    auto session = OpenSession(session_policy_.generation(), rotation_->current(),
                               std::min(left, absl::Seconds(1)));
    if (session.ok()) return session;
    spdlog::debug("dgt-run: rendezvous replica {}: {}", rotation_->current(),
                  session.status().message());
    if (session.status().code() == absl::StatusCode::kUnauthenticated) {
      telling = std::string(session.status().message());
    } else {
      all_tls = false;
    }
    if (session.status().code() == absl::StatusCode::kInvalidArgument) return session.status();
    absl::SleepFor(std::min(rotation_->OnAttemptFailed(), deadline - absl::Now()));
  }
  std::string message = absl::StrCat(
      "cannot reach any of the ", rotation_->endpoints().size(), " rendezvous replicas at ",
      absl::StrJoin(rotation_->endpoints(), ", "), " within ", absl::FormatDuration(timeout),
      " (is dgt-rendezvous running there? see --rdzv-connect-timeout)");
  if (all_tls && !telling.empty()) return absl::UnauthenticatedError(telling);
  if (!telling.empty()) absl::StrAppend(&message, "; one failed otherwise: ", telling);
  return absl::DeadlineExceededError(message);
}

std::string Agent::EndpointsText() const {
  return rotation_ ? absl::StrJoin(rotation_->endpoints(), ",") : rdzv_endpoint_;
}

rdzv_v1::AgentMessage Agent::MakeJoin() const {
  rdzv_v1::AgentMessage join_message;
  rdzv_v1::JoinRequest* join = join_message.mutable_join();
  join->set_run_id(options_.run_id);
  join->set_node_id(options_.node_id);
  join->set_min_nodes(options_.min_nodes);
  join->set_max_nodes(options_.max_nodes);
  join->set_nproc_per_node(options_.nproc_per_node);
  join->set_address(advertised_address_);
  join->set_store_port(store_ ? store_->port() : 0);
  join->set_last_call_timeout_s(options_.last_call_timeout_s);
  join->set_join_timeout_s(options_.join_timeout_s);
  // Group restarts are rounds decided by the rendezvous, for one node or many.
  join->set_max_restarts(options_.restart_policy == RestartPolicy::kGroup ? options_.max_restarts
                                                                          : 0);
  if (auto rejoin = RejoinAssignment()) *join->mutable_rejoin() = *rejoin;
  return join_message;
}

std::optional<rdzv_v1::Assignment> Agent::RejoinAssignment() const {
  if (round_ < 0) return std::nullopt;
  switch (state()) {
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kAwaitingOutcome:
      return current_assignment_;
    case NodeState::kRerounding:
      // The round the service moved to (its workers start once the old ones are gone).
      return lifecycle_->pending_assignment() ? *held_assignment_ : current_assignment_;
    case NodeState::kJoining:
    case NodeState::kWaitingForRound:  // Stopped by the service: no round to go back to.
    case NodeState::kDone:
      return std::nullopt;
  }
  return std::nullopt;
}

void Agent::StartReconnect(const grpc::Status& status) {
  const std::string ended = rotation_->current();
  const absl::Time now = env_.clock->Now();
  const SessionPolicy::Lost lost = session_policy_.OnLost(
      ended,
      IsStandbyAnswer(status) ? std::optional<std::string>(status.error_message()) : std::nullopt,
      now, state(), lifecycle_->GroupRestartLeft());
  const bool was_accepted = lost.was_accepted;
  // A session the service had taken was lost; one it never took (a standby replica, a service
  // going down) is a failed attempt: the next endpoint, or the backoff's next step.
  const absl::Duration pause = was_accepted ? rotation_->OnLost() : rotation_->OnAttemptFailed();
  const std::string keep = workers_.alive() > 0 ? "workers keep running; " : "";
  const bool first = lost.first;
  if (!rotation_->several()) {
    if (first) {
      spdlog::warn(
          "dgt-run: lost the rendezvous service at {} ({}); {}reconnecting for up to {} s "
          "(--rdzv-conf read_timeout)",
          ended, status.error_message(), keep, options_.reconnect_timeout_s);
    }
  } else if (lost.standby) {
    // While no replica leads, every pass gets the same answers: one line per replica and answer.
    spdlog::log(lost.standby_changed ? spdlog::level::info : spdlog::level::debug,
                "dgt-run: the rendezvous replica at {} is a standby ({}); trying {}", ended,
                status.error_message(), rotation_->current());
  } else if (first || was_accepted) {
    spdlog::warn(
        "dgt-run: {} the rendezvous replica at {} ({}); {}trying the replicas from {} for up to "
        "{:.1f} s (--rdzv-conf read_timeout)",
        was_accepted ? "lost" : "no session from", ended, status.error_message(), keep,
        rotation_->current(), absl::ToDoubleSeconds(session_policy_.WindowLeft(now)));
  } else {
    spdlog::info("dgt-run: the rendezvous replica at {} did not take the session ({}); trying {}",
                 ended, status.error_message(), rotation_->current());
  }
  if (lost.poll_marks) PollMarks();
  ScheduleReconnect(pause);
}

void Agent::ScheduleReconnect(absl::Duration pause) {
  if (state() == NodeState::kDone) return;
  switch (session_policy_.NextStep(env_.clock->Now())) {
    case SessionPolicy::Step::kIdle:
      return;
    case SessionPolicy::Step::kNoLeader:
      Finish(SessionPolicy::NoLeaderExitStatus(),
             session_policy_.NoLeaderMessage(rotation_->endpoints()));
      return;
    case SessionPolicy::Step::kWindowOver:
      OnReconnectWindowOver();
      return;
    case SessionPolicy::Step::kAttempt:
      break;
  }
  // The pause is jittered (EndpointRotation) so that the nodes of a big job do not all reconnect
  // to a restarted service at the same instant.
  reconnect_timer_.expires_after(absl::ToChronoMilliseconds(pause));
  reconnect_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) TryReconnect();
  });
}

void Agent::TryReconnect() {
  if (state() == NodeState::kDone || !ServiceLost() || lifecycle_->lingering()) return;
  // The previous attempt posted its result already (attempts are started from that result).
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  const absl::Duration left = session_policy_.WindowLeft(env_.clock->Now());
  if (left <= absl::ZeroDuration()) {
    OnReconnectWindowOver();
    return;
  }
  // Connecting blocks (up to the attempt's deadline): off the loop, which keeps serving the
  // workers.
  const absl::Duration attempt = std::min(left, absl::Seconds(1));
  const uint64_t gen = session_policy_.NewAttempt();
  reconnect_thread_ = std::thread([this, gen, attempt, endpoint = rotation_->current()] {
    auto session = OpenSession(gen, endpoint, attempt);
    {
      dgt::MutexLock lock(&reconnect_mu_);
      reconnect_result_ = std::move(session);
    }
    asio::post(io_, [this, gen] { OnReconnectAttempt(gen); });
  });
}

void Agent::OnReconnectAttempt(uint64_t gen) {
  absl::StatusOr<std::unique_ptr<RendezvousSession>> result =
      absl::UnknownError("no connection attempt");
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_) result = std::move(*reconnect_result_);
    reconnect_result_.reset();
  }
  if (state() == NodeState::kDone || !session_policy_.IsCurrent(gen) || !ServiceLost() ||
      lifecycle_->lingering()) {
    if (result.ok()) (*result)->Close();
    return;
  }
  if (!result.ok()) {
    spdlog::debug("dgt-run: reconnecting: {}", result.status().message());
    ScheduleReconnect(rotation_->OnAttemptFailed());
    return;
  }
  if (session_) session_->Close();  // The broken one; its end was delivered already.
  session_ = std::move(*result);
  rdzv_endpoint_ = rotation_->current();
  rdzv_v1::AgentMessage join = MakeJoin();
  session_policy_.OnReopened(join.join().has_rejoin()
                                 ? std::optional<int64_t>(join.join().rejoin().round())
                                 : std::nullopt);
  const std::optional<int64_t>& rejoin_round = session_policy_.rejoin_round();
  const bool ever_accepted = session_policy_.ever_accepted();
  // A replica that answered as a standby last time is most likely one still: the standby line
  // says what it answers (once), this one is for the log's debug level then.
  spdlog::log(
      session_policy_.AnsweredAsStandby(rdzv_endpoint_) ? spdlog::level::debug
                                                        : spdlog::level::info,
      "dgt-run: {} to the rendezvous service at {}; {}",
      ever_accepted ? "reconnected" : "connected", rdzv_endpoint_,
      rejoin_round
          ? absl::StrCat("rejoining run '", options_.run_id, "' at round ", *rejoin_round)
          : absl::StrCat("joining run '", options_.run_id, "'", ever_accepted ? " again" : ""));
  // A failed send means the stream ended already: its closed callback continues the reconnect.
  (void)session_->Send(join);
}

void Agent::ServiceBack() {
  reconnect_timer_.cancel();
  // A lingering node (its outcome decided from the marks) still waits for them.
  if (!lifecycle_->lingering()) marks_.CancelPollLater();
}

void Agent::OnRejoined() {
  const bool was_lost = ServiceLost();
  session_policy_.OnRejoined();
  if (was_lost) ServiceBack();
  spdlog::info("dgt-run: back in run '{}' at round {} (node rank {}); the workers kept running",
               options_.run_id, round_, assignment_.node_rank);
  // The report of this round may have gone to a service (or a leader replica) that died before
  // it counted it, or never left this node; no RunFinished came, or the agent would be done or
  // lingering. The service counts a node's report once.
  if (state() == NodeState::kAwaitingOutcome && last_report_ &&
      last_report_->report().round() == round_ && session_policy_.open() &&
      !lifecycle_->lingering()) {
    spdlog::info("dgt-run: sending this node's report of round {} again to {}", round_,
                 rdzv_endpoint_);
    (void)session_->Send(*last_report_);
  }
}

void Agent::OnReconnectWindowOver() {
  reconnect_timer_.cancel();
  Execute(lifecycle_->OnReconnectWindowOver(lifecycle_->lingering(), marks_.FailureWhenAllDone(),
                                            Alive()));
}

void Agent::OnServiceMessage(const rdzv_v1::ServiceMessage& message) {
  // A fresh join after reconnecting is answered: the service is back. (A rejoin's answer is its
  // Assignment, OnRejoined.)
  if (!message.has_error()) {
    const SessionPolicy::Answer answer = session_policy_.OnAnswer(rdzv_endpoint_);
    if (answer.accepted_now) rotation_->OnAccepted();
    if (!answer.took_over_from.empty()) {
      spdlog::info(
          "dgt-run: the rendezvous replica at {} took this node's session (the one at {} "
          "was lost)",
          rdzv_endpoint_, answer.took_over_from);
    }
    if (answer.service_back) ServiceBack();
  }
  switch (message.kind_case()) {
    case rdzv_v1::ServiceMessage::kProgress:
      lifecycle_->OnProgress(message.progress().joined_nodes());
      spdlog::info("dgt-run: run '{}': {} node(s) joined (min {}, max {})", options_.run_id,
                   message.progress().joined_nodes(), message.progress().min_nodes(),
                   message.progress().max_nodes());
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
      Execute(lifecycle_->OnRunFinished(outcome));
      return;
    }
    case rdzv_v1::ServiceMessage::kError: {
      // The service closes the stream after an Error: this node is not (or no longer) part of
      // the run, and its workers must not go on running ranks the run may give to another node.
      const bool rejoin = session_policy_.OnRefused(state());
      if (rejoin) reconnect_timer_.cancel();
      Execute(lifecycle_->OnRefused(message.error().message(), rejoin, Alive()));
      return;
    }
    case rdzv_v1::ServiceMessage::kStop:
      Execute(lifecycle_->OnStop(message.stop().reason(), Alive(), env_.clock->Now()));
      return;
    case rdzv_v1::ServiceMessage::KIND_NOT_SET:
      return;
  }
}

bool Agent::HostedByAnotherNode() const {
  return !rdzv_host_node_id_.empty() && rdzv_host_node_id_ != options_.node_id;
}

std::string Agent::HostLostMessage(const grpc::Status& status) const {
  return absl::StrCat("lost the rendezvous service at ", rdzv_endpoint_, " hosted by node '",
                      rdzv_host_node_id_, "' (c10d-style), so that node is gone",
                      status.error_message().empty() ? "" : ": ", status.error_message());
}

void Agent::OnSessionClosed(const grpc::Status& status) {
  session_policy_.OnClosed();
  closed_status_ = status;
  SessionEnd end;
  end.refused = IsRefusal(status);
  end.error = status.error_message();
  if (HostedByAnotherNode()) end.host_lost = HostLostMessage(status);
  end.lingering = lifecycle_->lingering();
  Execute(lifecycle_->OnSessionClosed(end, Alive()));
}

}  // namespace dgt::agent
