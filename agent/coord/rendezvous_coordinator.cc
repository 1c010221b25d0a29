#include "agent/coord/rendezvous_coordinator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "replica/leadership_status.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

// Whether a Session stream ended with a standby replica's answer (the HA contract).
bool IsStandbyAnswer(const grpc::Status& status) {
  return replica::StandbyAnswer(status).has_value();
}

}  // namespace

RendezvousCoordinator::RendezvousCoordinator(boost::asio::io_context& io,
                                             const LaunchOptions& options, const Clock* clock,
                                             Options coordinator_options, Node node, Sink sink)
    : io_(io),
      options_(options),
      clock_(clock),
      config_(std::move(coordinator_options)),
      node_(std::move(node)),
      sink_(std::move(sink)),
      reconnect_timer_(io),
      policy_(SessionPolicy::Options()),
      rotation_(config_.endpoints),
      marks_(io, config_.store_timeout),
      endpoint_(rotation_.current()) {
  SessionPolicy::Options policy_options;
  policy_options.reconnect_timeout = absl::Seconds(options_.reconnect_timeout_s);
  policy_options.connect_timeout = absl::Seconds(options_.connect_timeout_s);
  policy_options.several = rotation_.several();
  policy_ = SessionPolicy(policy_options);
}

RendezvousCoordinator::~RendezvousCoordinator() { Shutdown(); }

void RendezvousCoordinator::Shutdown() {
  // What is left is cancelled now, while the members its callbacks use exist.
  marks_.Drop();
  // A connection attempt in flight ends within its (1 s) deadline; its session is closed here,
  // while the loop its callbacks post to still exists.
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_ && reconnect_result_->ok()) (**reconnect_result_)->Close();
    reconnect_result_.reset();
  }
  if (session_) session_->Close();
  session_.reset();
  // Quietly: the agent's own last stderr line says how the run ended (docs/EXIT_CODES.md).
  if (config_.embedded) config_.embedded->Shutdown(absl::Seconds(1), /*quiet=*/true);
  config_.embedded.reset();
}

void RendezvousCoordinator::Finish(int exit_status, const std::string& message) {
  sink_(lifecycle_->Finish(exit_status, message));
}

absl::Status RendezvousCoordinator::Open(int* exit_status) {
  auto session = rotation_.several() ? OpenFirstReplica(absl::Seconds(options_.connect_timeout_s))
                                     : OpenSession(policy_.generation(), rotation_.current(),
                                                   absl::Seconds(options_.connect_timeout_s));
  if (!session.ok()) {
    *exit_status = SessionPolicy::OpenFailureExitStatus(session.status().code());
    return session.status();
  }
  session_ = std::move(*session);
  endpoint_ = rotation_.current();
  policy_.OnFirstOpened(clock_->Now());
  if (auto s = session_->Send(MakeJoin()); !s.ok()) {
    // The service already ended the stream (e.g. UNAUTHENTICATED): the session's closed callback
    // delivers its status, which is the reason to report.
    spdlog::debug("dgt-run: the join could not be sent: {}", s.message());
  }
  return absl::OkStatus();
}

std::string RendezvousCoordinator::EndpointsText() const {
  return absl::StrJoin(rotation_.endpoints(), ",");
}

absl::StatusOr<std::unique_ptr<RendezvousSession>> RendezvousCoordinator::OpenSession(
    uint64_t gen, const std::string& endpoint, absl::Duration timeout) {
  return RendezvousSession::Open(
      endpoint, timeout, rendezvous::ClientOptions::WithCredentials(config_.tls, config_.token),
      [this, gen](const rdzv_v1::ServiceMessage& m) {
        asio::post(io_, [this, gen, m] {
          if (policy_.IsCurrent(gen)) OnServiceMessage(m);
        });
      },
      [this, gen](const grpc::Status& status) {
        asio::post(io_, [this, gen, status] {
          if (policy_.IsCurrent(gen)) OnSessionClosed(status);
        });
      },
      /*fail_fast=*/rotation_.several());
}

absl::StatusOr<std::unique_ptr<RendezvousSession>> RendezvousCoordinator::OpenFirstReplica(
    absl::Duration timeout) {
  // Before the loop runs (Prepare): blocking is fine, and real time is what gRPC waits in.
  const absl::Time deadline = absl::Now() + timeout;
  bool all_tls = true;  // Every failure was a TLS disagreement (not admitted, exit 77).
  std::string telling;  // The last failure that is not "nothing there".
  // Each attempt takes at least a connect or a pause, and at most 1 s: bounded by `deadline`.
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    auto session =
        OpenSession(policy_.generation(), rotation_.current(), std::min(left, absl::Seconds(1)));
    if (session.ok()) return session;
    spdlog::debug("dgt-run: rendezvous replica {}: {}", rotation_.current(),
                  session.status().message());
    if (session.status().code() == absl::StatusCode::kUnauthenticated) {
      telling = std::string(session.status().message());
    } else {
      all_tls = false;
    }
    if (session.status().code() == absl::StatusCode::kInvalidArgument) return session.status();
    absl::SleepFor(std::min(rotation_.OnAttemptFailed(), deadline - absl::Now()));
  }
  std::string message = absl::StrCat(
      "cannot reach any of the ", rotation_.endpoints().size(), " rendezvous replicas at ",
      absl::StrJoin(rotation_.endpoints(), ", "), " within ", absl::FormatDuration(timeout),
      " (is dgt-rendezvous running there? see --rdzv-connect-timeout)");
  if (all_tls && !telling.empty()) return absl::UnauthenticatedError(telling);
  if (!telling.empty()) absl::StrAppend(&message, "; one failed otherwise: ", telling);
  return absl::DeadlineExceededError(message);
}

rdzv_v1::AgentMessage RendezvousCoordinator::MakeJoin() const {
  rdzv_v1::AgentMessage join_message;
  rdzv_v1::JoinRequest* join = join_message.mutable_join();
  join->set_run_id(options_.run_id);
  join->set_node_id(options_.node_id);
  join->set_min_nodes(options_.min_nodes);
  join->set_max_nodes(options_.max_nodes);
  join->set_nproc_per_node(options_.nproc_per_node);
  join->set_address(*node_.advertised_address);
  join->set_store_port(node_.store_port());
  join->set_last_call_timeout_s(options_.last_call_timeout_s);
  join->set_join_timeout_s(options_.join_timeout_s);
  // Group restarts are rounds decided by the rendezvous, for one node or many.
  join->set_max_restarts(options_.restart_policy == RestartPolicy::kGroup ? options_.max_restarts
                                                                          : 0);
  join->set_spare_nodes(options_.spare_nodes);
  // Replace mode keeps the survivors' workers when a spare takes a lost node's place.
  join->set_in_place_spares(options_.restart_policy == RestartPolicy::kRank &&
                            options_.recovery_mode == RecoveryMode::kReplace);
  if (auto rejoin = RejoinAssignment()) *join->mutable_rejoin() = *rejoin;
  return join_message;
}

std::optional<rdzv_v1::Assignment> RendezvousCoordinator::RejoinAssignment() const {
  if (*node_.round < 0) return std::nullopt;
  switch (state()) {
    case NodeState::kRunning:
    case NodeState::kRestarting:
    case NodeState::kStopping:
    case NodeState::kAwaitingOutcome:
      return current_assignment_;
    case NodeState::kRerounding:
      // The round the service moved to (its workers start once the old ones are gone).
      return lifecycle_->pending_assignment() ? *held_ : current_assignment_;
    case NodeState::kJoining:
    case NodeState::kWaitingForRound:  // Stopped by the service: no round to go back to.
    case NodeState::kDone:
      return std::nullopt;
  }
  return std::nullopt;
}

void RendezvousCoordinator::StartReconnect(const grpc::Status& status) {
  const std::string ended = rotation_.current();
  const absl::Time now = clock_->Now();
  const SessionPolicy::Lost lost = policy_.OnLost(
      ended,
      IsStandbyAnswer(status) ? std::optional<std::string>(status.error_message()) : std::nullopt,
      now, state(), lifecycle_->GroupRestartLeft());
  const bool was_accepted = lost.was_accepted;
  // A session the service had taken was lost; one it never took (a standby replica, a service
  // going down) is a failed attempt: the next endpoint, or the backoff's next step.
  const absl::Duration pause = was_accepted ? rotation_.OnLost() : rotation_.OnAttemptFailed();
  const std::string keep = node_.alive() > 0 ? "workers keep running; " : "";
  const bool first = lost.first;
  if (!rotation_.several()) {
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
                status.error_message(), rotation_.current());
  } else if (first || was_accepted) {
    spdlog::warn(
        "dgt-run: {} the rendezvous replica at {} ({}); {}trying the replicas from {} for up to "
        "{:.1f} s (--rdzv-conf read_timeout)",
        was_accepted ? "lost" : "no session from", ended, status.error_message(), keep,
        rotation_.current(), absl::ToDoubleSeconds(policy_.WindowLeft(now)));
  } else {
    spdlog::info("dgt-run: the rendezvous replica at {} did not take the session ({}); trying {}",
                 ended, status.error_message(), rotation_.current());
  }
  if (lost.poll_marks) PollMarks();
  ScheduleReconnect(pause);
}

void RendezvousCoordinator::ScheduleReconnect(absl::Duration pause) {
  if (state() == NodeState::kDone) return;
  switch (policy_.NextStep(clock_->Now())) {
    case SessionPolicy::Step::kIdle:
      return;
    case SessionPolicy::Step::kNoLeader:
      Finish(SessionPolicy::NoLeaderExitStatus(), policy_.NoLeaderMessage(rotation_.endpoints()));
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

void RendezvousCoordinator::TryReconnect() {
  if (state() == NodeState::kDone || !lost() || lifecycle_->lingering()) return;
  // The previous attempt posted its result already (attempts are started from that result).
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  const absl::Duration left = policy_.WindowLeft(clock_->Now());
  if (left <= absl::ZeroDuration()) {
    OnReconnectWindowOver();
    return;
  }
  // Connecting blocks (up to the attempt's deadline): off the loop, which keeps serving the
  // workers.
  const absl::Duration attempt = std::min(left, absl::Seconds(1));
  const uint64_t gen = policy_.NewAttempt();
  reconnect_thread_ = std::thread([this, gen, attempt, endpoint = rotation_.current()] {
    auto session = OpenSession(gen, endpoint, attempt);
    {
      dgt::MutexLock lock(&reconnect_mu_);
      reconnect_result_ = std::move(session);
    }
    asio::post(io_, [this, gen] { OnReconnectAttempt(gen); });
  });
}

void RendezvousCoordinator::OnReconnectAttempt(uint64_t gen) {
  absl::StatusOr<std::unique_ptr<RendezvousSession>> result =
      absl::UnknownError("no connection attempt");
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_) result = std::move(*reconnect_result_);
    reconnect_result_.reset();
  }
  if (state() == NodeState::kDone || !policy_.IsCurrent(gen) || !lost() ||
      lifecycle_->lingering()) {
    if (result.ok()) (*result)->Close();
    return;
  }
  if (!result.ok()) {
    spdlog::debug("dgt-run: reconnecting: {}", result.status().message());
    ScheduleReconnect(rotation_.OnAttemptFailed());
    return;
  }
  if (session_) session_->Close();  // The broken one; its end was delivered already.
  session_ = std::move(*result);
  endpoint_ = rotation_.current();
  rdzv_v1::AgentMessage join = MakeJoin();
  policy_.OnReopened(join.join().has_rejoin() ? std::optional<int64_t>(join.join().rejoin().round())
                                              : std::nullopt);
  const std::optional<int64_t>& rejoin_round = policy_.rejoin_round();
  const bool ever_accepted = policy_.ever_accepted();
  const std::string joining =
      rejoin_round
          ? absl::StrCat("rejoining run '", options_.run_id, "' at round ", *rejoin_round)
          : absl::StrCat("joining run '", options_.run_id, "'", ever_accepted ? " again" : "");
  spdlog::debug("dgt-run: session open to the rendezvous service at {}; {}", endpoint_, joining);
  // Said once the service answers (OnServiceMessage): the session may yet be refused.
  announce_ = absl::StrCat("dgt-run: ", ever_accepted ? "reconnected" : "connected",
                           " to the rendezvous service at ", endpoint_, "; ", joining);
  // A failed send means the stream ended already: its closed callback continues the reconnect.
  (void)session_->Send(join);
}

void RendezvousCoordinator::ServiceBack() {
  reconnect_timer_.cancel();
  // A lingering node (its outcome decided from the marks) still waits for them.
  if (!lifecycle_->lingering()) marks_.CancelPollLater();
}

void RendezvousCoordinator::OnRejoined() {
  const bool was_lost = lost();
  policy_.OnRejoined();
  if (was_lost) ServiceBack();
  spdlog::info("dgt-run: back in run '{}' at round {} (node rank {}); the workers kept running",
               options_.run_id, *node_.round, node_.assignment->node_rank);
  // The report of this round may have gone to a service (or a leader replica) that died before
  // it counted it, or never left this node; no RunFinished came, or the agent would be done or
  // lingering. The service counts a node's report once.
  if (state() == NodeState::kAwaitingOutcome && last_report_ &&
      last_report_->report().round() == *node_.round && policy_.open() &&
      !lifecycle_->lingering()) {
    spdlog::info("dgt-run: sending this node's report of round {} again to {}", *node_.round,
                 endpoint_);
    (void)session_->Send(*last_report_);
  }
}

void RendezvousCoordinator::OnRejoinTakenAsJoin() {
  const bool was_lost = lost();
  policy_.OnRejoined();
  if (was_lost) ServiceBack();
  spdlog::warn(
      "dgt-run: the rendezvous took this node's rejoin of run '{}' as a fresh join (the run went "
      "on without it): it joins the run's next round",
      options_.run_id);
}

void RendezvousCoordinator::OnReconnectWindowOver() {
  reconnect_timer_.cancel();
  sink_(lifecycle_->OnReconnectWindowOver(lifecycle_->lingering(), marks_.FailureWhenAllDone(),
                                          node_.alive()));
}

}  // namespace dgt::agent
