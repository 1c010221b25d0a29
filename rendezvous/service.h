// The rendezvous gRPC service (dgt.rendezvous.v1.Rendezvous) over the callback API, and
// RendezvousServer, which hosts it on a listening port. The same server runs in dgt-rendezvous,
// and embedded in `dgt-run --standalone`.
//
// Each Session stream is a reactor; the round logic is RoundStateMachine under one mutex, and a
// timer thread drives its deadlines. No reactor thread ever blocks.
//
// Group commit (a RoundStateOptions::backend given: etcd, where each write is a round trip):
// agent events (messages, ended streams) are queued. The reactor that finds no batch in flight
// becomes the committer and drains the queue in batches. It handles a batch's events in order
// (RoundStateMachine::BeginBatch: staged, not written), commits each run they touched once
// (EndBatch), and only then sends their messages, in order. Events that arrive meanwhile make
// the next batch: N joins during one write cost one more write, not N. A failed batch commit
// sends nothing of the batch and steps down (docs/ETCD.md, "Replicas"). Without a backend (in
// memory, where a commit costs nothing) each event is handled and sent at once.
//
// Thread-safety: thread-safe.
#ifndef DGT_RENDEZVOUS_SERVICE_H_
#define DGT_RENDEZVOUS_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/credentials.h"
#include "rendezvous/keepalive.h"
#include "rendezvous/metrics_http.h"
#include "rendezvous/round_state.h"

namespace dgt::rendezvous {

// Another service that follows a replica's leadership (dgt-rendezvous's jobs service; the server
// layer, server/server.h, wires it). Called under the rendezvous service's mutex: it must not
// call back into the rendezvous service.
class LeadershipFollower {
 public:
  virtual ~LeadershipFollower() = default;
  // This replica leads now. Errors: the follower cannot take over (the replica then gives its
  // leadership up, as when adopting the runs fails).
  virtual absl::Status TakeOver() = 0;
  // This replica no longer leads: `message` says why ("replica <id> lost its leadership: ...").
  virtual void StepDown(const std::string& message) = 0;
  // As a standby: the leader's address (empty: none now).
  virtual void SetLeader(const std::string& address) = 0;
};

class RendezvousService final : public v1::Rendezvous::CallbackService {
 public:
  // `token`: when non-empty, every RPC must carry "authorization: Bearer <token>", else it fails
  // with UNAUTHENTICATED. `max_sessions_per_peer`: when > 0, a Session stream from a peer address
  // (IP, any port) that already has that many open fails with RESOURCE_EXHAUSTED.
  // `elected`, `replica_id`, `on_step_down`: see "Replicas" below and RendezvousServerOptions.
  explicit RendezvousService(RoundStateOptions options = {}, std::string token = "",
                             int max_sessions_per_peer = 0, bool elected = false,
                             std::string replica_id = "",
                             std::function<void(const absl::Status&)> on_step_down = {});
  ~RendezvousService() override;

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServiceMessage>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

  // Stops the timer thread; call before the grpc::Server shuts down. `quiet`: the "ending N agent
  // session(s)" line at debug level, not info (an agent's embedded service: the agent's own
  // outcome must stay its last stderr line).
  void Stop(bool quiet = false);

  // Prometheus text exposition of the service's state and counters.
  std::string RenderMetrics();

  // --- Replicas (--backend=etcd; docs/ETCD.md, "Replicas"). A service made with
  // `elected` (RendezvousServerOptions::elected) starts as a standby: it refuses Session streams
  // with replica::StandbyStatus (UNAVAILABLE with a NotLeader detail naming the leader, if any),
  // serves GetStatus from its view, and decides nothing until TakeOver.
  // Without `elected` (the memory backend) it is always the leader.

  // This replica won the election: adopts every run (RoundStateMachine::AdoptRuns: read afresh,
  // running runs wait for their agents' rejoins) and serves. When adopting fails (etcd), it
  // stays a standby and calls `on_step_down` to give the leadership up. Called on the election's
  // thread; holds the service's mutex while it reads and writes the runs (etcd calls, each bounded
  // by the client's call_timeout): no agent is served meanwhile anyway.
  void TakeOver();
  // This replica is no longer the leader (`why`): every Session ends with UNAVAILABLE "replica
  // <id> lost its leadership: <why>", the sessions are forgotten (nothing is written about them),
  // and Session streams are refused as a standby's. Idempotent.
  void StepDown(const absl::Status& why);
  // This replica's name in messages (dgt-rendezvous sets its default, HOSTNAME:PORT, once the
  // port is bound, before the election starts).
  void SetReplicaId(std::string replica_id);
  // As a standby: who leads now (empty: nobody), for the refusal's message.
  void SetLeader(const std::string& replica, const std::string& address);
  bool is_leader();
  // The service that follows this replica's leadership (TakeOver, StepDown, SetLeader), or null.
  // Not owned; set before the election starts, cleared before the follower goes.
  void set_follower(LeadershipFollower* follower);
  // The operators' view of one run (RoundStateMachine::Status); nullopt for an unknown run. The
  // jobs service polls its started jobs' runs here.
  std::optional<RunStatus> RunStatusOf(const std::string& run_id);
  // Group commit: agent events queued behind the batch in flight (0 without a backend). For
  // tests.
  size_t queued_events();

 private:
  class SessionReactor;

  // One agent event: a message (converted from the wire, or why it cannot be), or the end of the
  // session's stream (no message). `term`: the term the session was opened in.
  struct Event {
    SessionId session = 0;
    uint64_t term = 0;
    std::optional<absl::StatusOr<AgentMessage>> message;
  };

  void OnMessage(SessionId session, uint64_t term, const v1::AgentMessage& message);
  void OnSessionEnded(SessionId session, uint64_t term);
  // Group commit: queues `event`, and drains the queue unless another thread is draining it.
  void Enqueue(Event event);
  void DrainQueue();
  // Runs `event` through the machine, appending its messages to `out` (a conversion error is
  // refused at once: it depends on no state).
  void HandleLocked(const Event& event, absl::Time now, std::vector<Outgoing>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unregister(SessionId session);
  void Dispatch(std::vector<Outgoing> outgoing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After each event: a failed commit ends the leadership (StepDownLocked, then on_step_down_).
  void CheckCommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepDownLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether events of `session` are to be handled: this replica leads and opened it in this term.
  bool ServingLocked(SessionId session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TimerLoop();

  const std::string token_;
  const int max_sessions_per_peer_;
  dgt::Mutex mu_;
  dgt::CondVar timer_cv_;
  RoundStateMachine machine_ ABSL_GUARDED_BY(mu_);
  // The sessions and the leadership, under their own mutex (taken after mu_ where both are): a
  // Session stream opens, and a standby refuses one, while a commit holds mu_. leader_ and term_
  // change only with both held.
  dgt::Mutex reg_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<SessionId, SessionReactor*> sessions_ ABSL_GUARDED_BY(reg_mu_);
  SessionId next_session_ ABSL_GUARDED_BY(reg_mu_) = 1;
  // Open sessions by peer address (IP without port).
  absl::flat_hash_map<std::string, int> sessions_per_peer_ ABSL_GUARDED_BY(reg_mu_);
  uint64_t refused_sessions_ ABSL_GUARDED_BY(reg_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const bool elected_;
  LeadershipFollower* follower_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
  // The same, for Session (which takes only reg_mu_); written with replica_id_, under both.
  std::string session_replica_id_ ABSL_GUARDED_BY(reg_mu_);
  const std::function<void(const absl::Status&)> on_step_down_;
  bool leader_ ABSL_GUARDED_BY(reg_mu_);
  // Incremented at each takeover and step-down; a session belongs to the term it was opened in.
  uint64_t term_ ABSL_GUARDED_BY(reg_mu_) = 0;
  std::string leader_replica_ ABSL_GUARDED_BY(reg_mu_);
  std::string leader_address_ ABSL_GUARDED_BY(reg_mu_);
  bool standby_logged_ ABSL_GUARDED_BY(reg_mu_) = false;  // SetLeader logged the current leader.

  std::thread timer_;
  // Group commit (see the top of this file): on with a RoundStateOptions::backend.
  const bool group_commit_;
  // Taken without mu_ (a reactor queues an event while a batch commits) and never while mu_ is
  // held by the same thread.
  dgt::Mutex queue_mu_;
  std::vector<Event> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool draining_ ABSL_GUARDED_BY(queue_mu_) = false;
};

struct RendezvousServerOptions {
  // "host:port" to serve gRPC on (port 0 picks a free one).
  std::string listen = "127.0.0.1:0";
  RoundStateOptions rounds;
  KeepaliveOptions keepalive;
  TlsFiles tls;
  // Shared bearer token required on every RPC; empty: none.
  std::string token;
  // "host:port" for Prometheus metrics over HTTP (GET /metrics); empty: off.
  std::string metrics_listen;
  // Open Session streams allowed from one peer IP (RESOURCE_EXHAUSTED beyond); 0: no limit. One
  // agent holds one stream per run, so a normal host needs a handful.
  int max_sessions_per_peer = 1024;
  // One of several replicas electing a leader (etcd/leader_election.h): start as a
  // standby, serve after RendezvousService::TakeOver. `replica_id` names it in messages;
  // `on_step_down` is called (under the service's mutex: it must not block or call back) when
  // the service gives its leadership up by itself (a failed commit): etcd::LeaderElection::Resign.
  bool elected = false;
  std::string replica_id;
  std::function<void(const absl::Status&)> on_step_down;
};

// The rendezvous service alone on a port: dgt-run's embedded rendezvous (--standalone) and tests.
// dgt-rendezvous composes it with the jobs service in the server layer (server/server.h).
class RendezvousServer {
 public:
  // Serves the rendezvous service (and the gRPC health service) as `options` say.
  // Errors: Unavailable when an address cannot be bound; InvalidArgument for bad TLS files or a
  // malformed metrics address.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const RendezvousServerOptions& options);
  ~RendezvousServer();

  int port() const { return port_; }
  RendezvousService* service() const { return service_.get(); }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  // Stops accepting, ends every session, and waits up to `grace` for in-flight calls. `quiet`:
  // as RendezvousService::Stop.
  void Shutdown(absl::Duration grace = absl::Seconds(1), bool quiet = false);

 private:
  RendezvousServer() = default;
  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_SERVICE_H_
