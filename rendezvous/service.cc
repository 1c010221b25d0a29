#include "rendezvous/service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "rendezvous/proto_convert.h"
#include "replica/leadership_status.h"
#include "server/auth.h"
#include "server/grpc_server.h"
#include "server/queued_write_reactor.h"

namespace dgt::rendezvous {

// One agent's session stream. Writes are queued and sent one at a time; the stream finishes after
// a message marked `close`, or when the agent goes away.
class RendezvousService::SessionReactor final
    : public server::QueuedWriteReactor<v1::AgentMessage, v1::ServiceMessage> {
 public:
  SessionReactor(RendezvousService* service, SessionId id, std::string peer, std::string peer_ip,
                 uint64_t term)
      : service_(service),
        id_(id),
        peer_(std::move(peer)),
        peer_ip_(std::move(peer_ip)),
        term_(term) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      service_->OnSessionEnded(id_, term_);
      End();
      return;
    }
    service_->OnMessage(id_, term_, incoming_);
    StartRead(&incoming_);
  }

  void OnCancel() override { service_->OnSessionEnded(id_, term_); }

  void OnDone() override {
    service_->OnSessionEnded(id_, term_);
    service_->Unregister(id_);
    delete this;
  }

  const std::string& peer() const { return peer_; }
  const std::string& peer_ip() const { return peer_ip_; }
  uint64_t term() const { return term_; }

 private:
  RendezvousService* service_;
  const SessionId id_;
  const std::string peer_;
  const std::string peer_ip_;
  const uint64_t term_;
  v1::AgentMessage incoming_;
};

using RejectReactor = server::RejectReactor<v1::AgentMessage, v1::ServiceMessage>;

namespace {

// "ipv4:10.0.0.1:5000" → "10.0.0.1"; "ipv6:[::1]:5000" → "[::1]"; anything else as it is.
std::string PeerIp(const std::string& peer) {
  absl::string_view p(peer);
  if (!absl::ConsumePrefix(&p, "ipv4:")) absl::ConsumePrefix(&p, "ipv6:");
  if (p.size() != peer.size()) {
    size_t colon = p.rfind(':');
    if (colon != absl::string_view::npos) p = p.substr(0, colon);
  }
  return std::string(p.data(), p.size());
}

}  // namespace

RendezvousService::RendezvousService(RoundStateOptions options, std::string token,
                                     int max_sessions_per_peer, bool elected,
                                     std::string replica_id,
                                     std::function<void(const absl::Status&)> on_step_down)
    : token_(std::move(token)),
      max_sessions_per_peer_(max_sessions_per_peer),
      machine_(std::move(options)),
      elected_(elected),
      replica_id_(std::move(replica_id)),
      session_replica_id_(replica_id_),
      on_step_down_(std::move(on_step_down)),
      leader_(!elected),
      group_commit_(options.backend != nullptr) {
  timer_ = std::thread([this] { TimerLoop(); });
}

RendezvousService::~RendezvousService() { Stop(); }

void RendezvousService::Stop(bool quiet) {
  {
    dgt::MutexLock lock(&mu_);
    dgt::MutexLock registry(&reg_mu_);
    if (!stopping_ && !sessions_.empty()) {
      spdlog::log(quiet ? spdlog::level::debug : spdlog::level::info,
                  "rendezvous: shutting down; ending {} agent session(s)", sessions_.size());
    }
    stopping_ = true;
    timer_cv_.SignalAll();
  }
  if (timer_.joinable()) timer_.join();
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::ServiceMessage>* RendezvousService::Session(
    grpc::CallbackServerContext* context) {
  if (!server::BearerAuthorized(*context, token_)) {
    spdlog::warn("rendezvous: refusing {}: missing or wrong bearer token", context->peer());
    return new RejectReactor(server::MissingBearerToken());
  }
  std::string peer_ip = PeerIp(context->peer());
  // Not the service's mutex: a stream opens while a commit is in flight.
  dgt::MutexLock lock(&reg_mu_);
  if (!leader_) {
    // The contract agents rely on (--rdzv-endpoint a,b): a standby's answer moves them on.
    return new RejectReactor(replica::StandbyStatus(session_replica_id_, leader_address_));
  }
  int& open = sessions_per_peer_[peer_ip];
  if (max_sessions_per_peer_ > 0 && open >= max_sessions_per_peer_) {
    // One line per 1,000 refusals: a flood must not flood the log too.
    if (refused_sessions_++ % 1000 == 0) {
      spdlog::warn("rendezvous: refusing sessions from {}: {} open (--max-sessions-per-peer)",
                   peer_ip, open);
    }
    return new RejectReactor(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("peer ", peer_ip, " already has ", open, " rendezvous session",
                     open == 1 ? "" : "s", " open (dgt-rendezvous --max-sessions-per-peer)")));
  }
  ++open;
  SessionId id = next_session_++;
  auto* reactor = new SessionReactor(this, id, context->peer(), std::move(peer_ip), term_);
  sessions_[id] = reactor;
  return reactor;
}

void RendezvousService::OnMessage(SessionId session, uint64_t term,
                                  const v1::AgentMessage& message) {
  // Converted here, outside the service's mutex.
  Event event{session, term, FromProto(message)};
  if (group_commit_) {
    Enqueue(std::move(event));
    return;
  }
  dgt::MutexLock lock(&mu_);
  if (stopping_ || !ServingLocked(session)) return;
  std::vector<Outgoing> out;
  HandleLocked(event, absl::Now(), out);
  Dispatch(std::move(out));
  CheckCommitLocked();
}

void RendezvousService::HandleLocked(const Event& event, absl::Time now,
                                     std::vector<Outgoing>& out) {
  auto append = [&out](std::vector<Outgoing> more) {
    if (out.empty()) {
      out = std::move(more);
    } else {
      out.insert(out.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
    }
  };
  const SessionId session = event.session;
  if (!event.message) {
    append(machine_.OnSessionClosed(session, now));
    timer_cv_.SignalAll();  // A join deadline may have started.
    return;
  }
  const absl::StatusOr<AgentMessage>& converted = *event.message;
  if (!converted.ok()) {
    dgt::MutexLock registry(&reg_mu_);
    auto it = sessions_.find(session);
    if (it != sessions_.end()) {
      it->second->Send(ToProto(ServiceMessage(Refusal{converted.status()})), /*close=*/true);
    }
    return;
  }
  if (const auto* j = std::get_if<JoinRequest>(&*converted)) {
    spdlog::debug(
        "rendezvous: node {} ({}, store port {}) joins run '{}' ({}:{} nodes, {} per "
        "node)",
        j->node_id, j->address, j->store_port, j->run_id, j->min_nodes, j->max_nodes,
        j->nproc_per_node);
    append(machine_.OnJoin(session, *j, now));
    timer_cv_.SignalAll();  // A last-call deadline may have started.
  } else if (const auto* report = std::get_if<NodeReport>(&*converted)) {
    append(machine_.OnReport(session, *report, now));
    timer_cv_.SignalAll();
  } else if (const auto* ready = std::get_if<StoreReady>(&*converted)) {
    append(machine_.OnStoreReady(session, *ready, now));
  }
}

void RendezvousService::Enqueue(Event event) {
  {
    dgt::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(event));
    // The thread draining the queue takes this event into its next batch.
    if (draining_) return;
    draining_ = true;
  }
  DrainQueue();
}

void RendezvousService::DrainQueue() {
  // Bounded: each pass takes what queued while the previous batch committed; the loop ends when
  // a batch committed with nothing queued behind it.
  for (;;) {
    std::vector<Event> batch;
    {
      dgt::MutexLock lock(&queue_mu_);
      if (queue_.empty()) {
        draining_ = false;
        return;
      }
      batch.swap(queue_);
    }
    dgt::MutexLock lock(&mu_);
    if (stopping_) continue;
    const absl::Time now = absl::Now();
    bool leader = false;
    uint64_t term = 0;
    {
      // Both change only under mu_ as well: they hold for the whole batch.
      dgt::MutexLock registry(&reg_mu_);
      leader = leader_;
      term = term_;
    }
    std::vector<Outgoing> out;
    machine_.BeginBatch();
    for (const Event& event : batch) {
      // A session of an earlier term (another leadership) is not this replica's to serve.
      if (elected_ && (!leader || event.term != term)) continue;
      HandleLocked(event, now, out);
    }
    // One write per touched run; the batch's messages only once it holds.
    if (machine_.EndBatch().ok()) Dispatch(std::move(out));
    CheckCommitLocked();
  }
}
bool RendezvousService::ServingLocked(SessionId session) {
  if (!elected_) return true;
  dgt::MutexLock registry(&reg_mu_);
  if (!leader_) return false;
  auto it = sessions_.find(session);
  return it == sessions_.end() || it->second->term() == term_;
}

void RendezvousService::CheckCommitLocked() {
  const absl::Status failure = machine_.commit_failure();
  if (failure.ok() || !elected_ || !is_leader()) return;
  StepDownLocked(failure);
  if (on_step_down_) on_step_down_(failure);
}

void RendezvousService::StepDownLocked(const absl::Status& why) {
  dgt::MutexLock registry(&reg_mu_);
  if (!leader_ || !elected_) return;
  leader_ = false;
  ++term_;
  machine_.ForgetSessions();
  const std::string message =
      absl::StrCat("replica ", replica_id_, " lost its leadership: ", why.message());
  spdlog::warn("rendezvous: {}; ending {} agent session(s)", message, sessions_.size());
  for (auto& [id, reactor] : sessions_) {
    reactor->Abort(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
  }
  if (follower_ != nullptr) follower_->StepDown(message);
  timer_cv_.SignalAll();
}

void RendezvousService::StepDown(const absl::Status& why) {
  dgt::MutexLock lock(&mu_);
  StepDownLocked(why);
}

void RendezvousService::TakeOver() {
  dgt::MutexLock lock(&mu_);
  if (stopping_ || is_leader() || !elected_) return;
  {
    dgt::MutexLock registry(&reg_mu_);
    ++term_;
  }
  if (absl::Status adopted = machine_.AdoptRuns(absl::Now()); !adopted.ok()) {
    spdlog::warn("rendezvous: replica {} won the election but cannot take the runs over: {}",
                 replica_id_, adopted.ToString());
    if (on_step_down_) on_step_down_(adopted);
    return;
  }
  if (follower_ != nullptr) {
    if (absl::Status taken = follower_->TakeOver(); !taken.ok()) {
      spdlog::warn("rendezvous: replica {} won the election but cannot take the jobs over: {}",
                   replica_id_, taken.ToString());
      if (on_step_down_) on_step_down_(taken);
      return;
    }
  }
  {
    dgt::MutexLock registry(&reg_mu_);
    leader_ = true;
    leader_replica_ = replica_id_;
    leader_address_.clear();
    standby_logged_ = false;
  }
  spdlog::info("rendezvous: replica {} leads: {} run(s) taken over", replica_id_,
               machine_.run_count());
  timer_cv_.SignalAll();
}

void RendezvousService::SetReplicaId(std::string replica_id) {
  dgt::MutexLock lock(&mu_);
  dgt::MutexLock registry(&reg_mu_);
  session_replica_id_ = replica_id;
  replica_id_ = std::move(replica_id);
}

void RendezvousService::SetLeader(const std::string& replica, const std::string& address) {
  {
    dgt::MutexLock registry(&reg_mu_);
    if (leader_) return;  // Without waiting for mu_, which a leader holds while it commits.
  }
  // replica_id_ and follower_ are the main mutex's; the registry's is taken after it.
  dgt::MutexLock lock(&mu_);
  dgt::MutexLock registry(&reg_mu_);
  if (leader_) return;
  // The election says who leads after each campaign (every lease TTL): the log, once per change.
  const bool changed = !standby_logged_ || replica != leader_replica_ || address != leader_address_;
  standby_logged_ = true;
  leader_replica_ = replica;
  leader_address_ = address;
  if (follower_ != nullptr) follower_->SetLeader(address);
  if (!changed) return;
  if (replica.empty()) {
    spdlog::info("rendezvous: replica {} is a standby; no leader now", replica_id_);
  } else {
    spdlog::info("rendezvous: replica {} is a standby; the leader is {} at {}", replica_id_,
                 replica, address.empty() ? "an unknown address" : address);
  }
}

void RendezvousService::set_follower(LeadershipFollower* follower) {
  dgt::MutexLock lock(&mu_);
  follower_ = follower;
}

bool RendezvousService::is_leader() {
  dgt::MutexLock lock(&reg_mu_);
  return leader_;
}

void RendezvousService::OnSessionEnded(SessionId session, uint64_t term) {
  if (group_commit_) {
    Enqueue(Event{session, term, std::nullopt});
    return;
  }
  dgt::MutexLock lock(&mu_);
  // The service itself is shutting down and ending every stream: nodes are not lost, and no new
  // round (or "stop your workers") must come of it.
  if (stopping_ || !ServingLocked(session)) return;
  std::vector<Outgoing> out;
  HandleLocked(Event{session, term, std::nullopt}, absl::Now(), out);
  Dispatch(std::move(out));
  CheckCommitLocked();
}

grpc::ServerUnaryReactor* RendezvousService::GetStatus(grpc::CallbackServerContext* context,
                                                       const v1::GetStatusRequest* request,
                                                       v1::GetStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!server::BearerAuthorized(*context, token_)) {
    reactor->Finish(server::MissingBearerToken());
    return reactor;
  }
  {
    dgt::MutexLock lock(&mu_);
    *response = ToProto(machine_.Status(request->run_id(), absl::Now()));
    dgt::MutexLock registry(&reg_mu_);
    if (elected_) {
      response->set_replica(replica_id_);
      if (!leader_) response->set_leader_address(leader_address_);
    }
    response->set_from_leader(leader_);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

std::optional<RunStatus> RendezvousService::RunStatusOf(const std::string& run_id) {
  dgt::MutexLock lock(&mu_);
  std::vector<RunStatus> runs = machine_.Status(run_id, absl::Now());
  for (RunStatus& run : runs) {
    if (run.run_id == run_id) return std::move(run);
  }
  return std::nullopt;
}

size_t RendezvousService::queued_events() {
  dgt::MutexLock lock(&queue_mu_);
  return queue_.size();
}

void RendezvousService::Unregister(SessionId session) {
  dgt::MutexLock lock(&reg_mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  auto peer = sessions_per_peer_.find(it->second->peer_ip());
  if (peer != sessions_per_peer_.end() && --peer->second <= 0) sessions_per_peer_.erase(peer);
  sessions_.erase(it);
}

void RendezvousService::Dispatch(std::vector<Outgoing> outgoing) {
  dgt::MutexLock registry(&reg_mu_);
  // One line per round (not per node): a round of 10,000 nodes must not log 10,000 lines.
  int stops = 0;
  std::string stop_reason;
  for (Outgoing& o : outgoing) {
    auto it = sessions_.find(o.session);
    if (it == sessions_.end()) continue;
    if (const auto* a = std::get_if<Assignment>(&o.message)) {
      if (a->node_rank == 0) {
        spdlog::info(
            "rendezvous: run '{}' round {} ({}): {} nodes, world size {}, restart {}, "
            "master {}:{}",
            a->run_id, a->round, a->reason, a->node_count, a->world_size, a->restart_count,
            a->master_addr, a->master_port);
      }
    } else if (const auto* finished = std::get_if<RunFinished>(&o.message)) {
      spdlog::debug("rendezvous: run finished for {}: {}", it->second->peer(), finished->message);
    } else if (const auto* stop = std::get_if<StopWorkers>(&o.message)) {
      ++stops;
      if (stops == 1) stop_reason = stop->reason;
    } else if (const auto* refusal = std::get_if<Refusal>(&o.message)) {
      spdlog::warn("rendezvous: refusing {}: {}", it->second->peer(), refusal->status.message());
    }
  }
  if (stops > 0) {
    spdlog::warn("rendezvous: telling {} node(s) to stop their workers: {}", stops, stop_reason);
  }
  for (Outgoing& o : outgoing) {
    const auto* finished = std::get_if<RunFinished>(&o.message);
    if (finished != nullptr && o.close) {
      spdlog::info("rendezvous: run {}: {}", finished->succeeded ? "succeeded" : "failed",
                   finished->message);
      break;
    }
  }
  // The wire messages are made here, the only place the service writes them.
  for (Outgoing& o : outgoing) {
    auto it = sessions_.find(o.session);
    if (it == sessions_.end()) continue;
    it->second->Send(ToProto(o.message), o.close);
  }
}

std::string RendezvousService::RenderMetrics() {
  dgt::MutexLock lock(&mu_);
  dgt::MutexLock registry(&reg_mu_);
  const RoundStateMachine::Counters& c = machine_.counters();
  std::string out;
  absl::StrAppend(&out, "# HELP dgt_rendezvous_runs Runs known to the service, by state.\n",
                  "# TYPE dgt_rendezvous_runs gauge\n");
  for (const auto& [state, n] : machine_.RunsByState()) {
    absl::StrAppend(&out, "dgt_rendezvous_runs{state=\"", state, "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP dgt_rendezvous_leader 1 when this replica serves agents (the leader; "
                  "always with --backend=memory), 0 for a standby.\n",
                  "# TYPE dgt_rendezvous_leader gauge\n", "dgt_rendezvous_leader ", leader_ ? 1 : 0,
                  "\n");
  absl::StrAppend(&out, "# HELP dgt_rendezvous_sessions Open agent sessions.\n",
                  "# TYPE dgt_rendezvous_sessions gauge\n", "dgt_rendezvous_sessions ",
                  sessions_.size(), "\n");
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v,
                    "\n");
  };
  counter("dgt_rendezvous_joins_total", "Join requests received.", c.joins);
  counter("dgt_rendezvous_refused_joins_total", "Join requests refused.", c.refused_joins);
  counter("dgt_rendezvous_refused_sessions_total",
          "Session streams refused: too many open from one peer.", refused_sessions_);
  counter("dgt_rendezvous_rounds_total", "Rounds started.", c.rounds);
  counter("dgt_rendezvous_restarts_total", "Rounds started after a worker failure.", c.restarts);
  counter("dgt_rendezvous_nodes_lost_total", "Members lost while their round ran.", c.nodes_lost);
  counter("dgt_rendezvous_runs_succeeded_total", "Runs that ended with success.", c.runs_succeeded);
  counter("dgt_rendezvous_runs_failed_total", "Runs that ended with a failure.", c.runs_failed);
  counter("dgt_rendezvous_failed_commits_total",
          "Events whose write to the run state failed (the replica stepped down).",
          c.failed_commits);
  return out;
}

void RendezvousService::TimerLoop() {
  dgt::MutexLock lock(&mu_);
  while (!stopping_) {
    if (!is_leader()) {
      // A standby decides nothing; TakeOver wakes the loop.
      timer_cv_.Wait(&mu_);
      continue;
    }
    std::optional<absl::Time> next = machine_.NextDeadline();
    absl::Time now = absl::Now();
    if (next && *next <= now) {
      Dispatch(machine_.OnTick(now));
      CheckCommitLocked();
      continue;
    }
    timer_cv_.WaitWithDeadline(&mu_, next.value_or(absl::InfiniteFuture()));
  }
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const RendezvousServerOptions& options) {
  auto listen = server::ResolveListenAddress(options.listen);
  if (!listen.ok()) return listen.status();
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->service_ = std::make_unique<RendezvousService>(
      options.rounds, options.token, options.max_sessions_per_peer, options.elected,
      options.replica_id, options.on_step_down);
  server::GrpcServerOptions grpc_options;
  grpc_options.listen = *listen;
  grpc_options.credentials = *credentials;
  grpc_options.keepalive_time_ms = options.keepalive.keepalive_time_ms;
  grpc_options.keepalive_timeout_ms = options.keepalive.keepalive_timeout_ms;
  grpc_options.services = {server->service_.get()};
  auto grpc_server = server::StartGrpcServer(grpc_options, &server->port_);
  if (!grpc_server.ok()) return grpc_server.status();
  server->server_ = *std::move(grpc_server);
  if (!options.metrics_listen.empty()) {
    auto hp = ParseListenAddress(options.metrics_listen, "--metrics-listen");
    if (!hp.ok()) return hp.status();
    RendezvousService* service = server->service_.get();
    server->metrics_ =
        std::make_unique<MetricsHttpServer>([service] { return service->RenderMetrics(); });
    if (absl::Status s = server->metrics_->Start(hp->host, hp->port); !s.ok()) return s;
  }
  return server;
}

RendezvousServer::~RendezvousServer() { Shutdown(); }

void RendezvousServer::Shutdown(absl::Duration grace, bool quiet) {
  if (shut_down_) return;
  shut_down_ = true;
  if (metrics_) metrics_->Stop();
  if (service_) service_->Stop(quiet);
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
}

}  // namespace dgt::rendezvous
