#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

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

}  // namespace

void Agent::OnAssignment(const rdzv_v1::Assignment& a) {
  if (session_policy_.rejoin_round() &&
      IsSameRound(a, RejoinAssignment().value_or(rdzv_v1::Assignment()))) {
    OnRejoined();  // The service took this node back into its round: nothing restarts.
    return;
  }
  held_assignment_ = a;
  RoundAssignment round;
  round.round = a.round();
  round.restart_count = a.restart_count();
  round.node_rank = a.node_rank();
  round.node_count = a.node_count();
  round.reason = a.reason();
  Execute(lifecycle_->OnAssignment(round, Alive(), env_.clock->Now()));
}

void Agent::ApplyAssignment(const rdzv_v1::Assignment& a) {
  const bool first_round = round_ < 0;
  round_ = a.round();
  current_assignment_ = a;
  assignment_.run_id = a.run_id();
  assignment_.node_rank = a.node_rank();
  assignment_.node_count = a.node_count();
  assignment_.world_size = a.world_size();
  assignment_.first_global_rank = a.first_global_rank();
  assignment_.local_world_size = options_.nproc_per_node;
  assignment_.master_addr = a.master_addr();
  assignment_.master_port = a.master_port();
  assignment_.restart_count = a.restart_count();
  rdzv_host_node_id_ = a.host_node_id();
  assignment_.max_restarts = options_.max_restarts;
  // The previous round's store (if this node served it) has no readers left.
  if (round_store_) {
    round_store_->Stop();
    round_store_.reset();
  }
  if (a.node_rank() == 0 && store_ && a.master_port() == store_->port()) {
    // This node's standby store serves the round; open the next standby so that a later round
    // starts on an empty store too.
    round_store_ = std::move(store_);
    store::ServerOptions next;
    next.host = advertised_address_;
    store_ = env_.store_host(next);
    if (absl::Status st = store_->Start(); !st.ok()) {
      spdlog::error("dgt-run: cannot open the next store: {}", st.message());
      store_.reset();
    } else if (session_policy_.open()) {
      rdzv_v1::AgentMessage ready;
      ready.mutable_store_ready()->set_store_port(store_->port());
      (void)session_->Send(ready);
    }
  }
  workers_.UpdateNetworkEnv(a.master_addr());
  spdlog::info(
      "dgt-run: run '{}' round {} ({}): node rank {} of {}, ranks {}..{} of world size "
      "{}, MASTER_ADDR={} MASTER_PORT={}, restart count {}",
      a.run_id(), a.round(), a.reason(), a.node_rank(), a.node_count(), a.first_global_rank(),
      a.first_global_rank() + options_.nproc_per_node - 1, a.world_size(), a.master_addr(),
      a.master_port(), a.restart_count());
  if (first_round) {
    BeginRun(a.reason());
  } else {
    Execute(lifecycle_->OnRoundApplied(CurrentRound(a.reason())));
  }
}

RoundMarks::Round Agent::MarksRound() const {
  return RoundMarks::Round{round_, assignment_.node_rank, assignment_.node_count,
                           assignment_.master_addr, assignment_.master_port};
}

void Agent::MarkDone(int exit_status) { marks_.MarkDone(MarksRound(), exit_status); }

void Agent::PollMarks() {
  if (state() == NodeState::kDone) return;
  marks_.Poll(MarksRound(), [this] { OnMarks(); });
}

void Agent::OnMarks() {
  if (!lifecycle_ || state() == NodeState::kDone) return;
  // The decisions are NodeLifecycle::OnMarks's.
  const absl::Time now = env_.clock->Now();
  Execute(lifecycle_->OnMarks(marks_.View(assignment_.node_rank), ServiceLost(), now,
                              session_policy_.LostFor(now)));
}

void Agent::FinishFromMarks(int exit_status, const std::string& message) {
  if (assignment_.node_rank == 0) {
    FinishLinger(exit_status, message, /*wait_for_seen=*/true);
    return;
  }
  // Node rank 0 keeps its store until every node has seen the outcome.
  // Terminate flushes it before the agent exits.
  marks_.MarkSeen(MarksRound());
  Finish(exit_status, message);
}

void Agent::FinishLinger(int exit_status, const std::string& message, bool wait_for_seen) {
  if (state() == NodeState::kDone || lifecycle_->lingering()) return;
  // With the service there, the other nodes hear from it (a new round has a new store): only
  // without it do they still depend on this node's store.
  if (!round_store_ || assignment_.node_count <= 1 || round_ < 0 || !ServiceLost()) {
    Finish(exit_status, message);
    return;
  }
  lifecycle_->OnLingerStarted(exit_status, message, wait_for_seen,
                              env_.clock->Now() + absl::Seconds(options_.reconnect_timeout_s));
  // The outcome is decided: rejoining the service now would only hold this node in a run that
  // the others have left (and stop the polls of the marks the linger waits for).
  reconnect_timer_.cancel();
  spdlog::info(
      "dgt-run: node rank 0 keeps the round's store until every node's workers are done (at "
      "most {} s)",
      options_.reconnect_timeout_s);
  PollMarks();
}

}  // namespace dgt::agent
