// RendezvousCoordinator: the rendezvous service's side of a node as a Coordinator. Owns the
// Session stream to the service (one endpoint, or the replicas of one service through an
// EndpointRotation), the reconnect thread and timer, the TLS files and token, the rendezvous
// service this agent hosts in-process (--standalone, c10d-style), the service's held
// assignment, this node's last report, the round's done marks and the round's store when this
// node serves it.
//
// Decides nothing: the session's rules are SessionPolicy's (agent/lifecycle/session_policy.h)
// and the node's NodeLifecycle's; this class hands the service's messages to the lifecycle and
// its actions to the sink. Thread-compatible: used from the agent's event loop only (the
// reconnect thread only opens a session and posts its result to the loop).
#ifndef DGT_AGENT_COORD_RENDEZVOUS_COORDINATOR_H_
#define DGT_AGENT_COORD_RENDEZVOUS_COORDINATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/coord/coordinator.h"
#include "agent/coord/rendezvous_host.h"
#include "agent/coord/rendezvous_session.h"
#include "agent/coord/round_marks.h"
#include "agent/flags/launch_options.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/lifecycle/session_policy.h"
#include "agent/workers/worker_env.h"
#include "boost/asio.hpp"
#include "common/mutex.h"
#include "dgt/store/server.h"
#include "rendezvous/credentials.h"
#include "replica/endpoint_rotation.h"

namespace dgt::agent {

class RendezvousCoordinator final : public Coordinator {
 public:
  struct Options {
    // The service's endpoints, resolved, in the given order (one, or several replicas).
    std::vector<std::string> endpoints;
    rendezvous::TlsFiles tls;
    std::string token;  // Bearer token of --rdzv-token-file; empty for none.
    // The service hosted in this process, if any (shut down with this object).
    std::unique_ptr<rendezvous::RendezvousServer> embedded;
    // Connecting to the round's store, and each request to it (done marks).
    absl::Duration store_timeout = absl::Seconds(1);
  };
  // What this class reads of the node's round. The pointed-to values are the Agent's and
  // outlive this object.
  struct Node {
    const int64_t* round = nullptr;  // -1 before the first round.
    const NodeAssignment* assignment = nullptr;
    const std::string* advertised_address = nullptr;
    std::function<int()> alive;       // Workers of the current group still running.
    std::function<int()> store_port;  // The standby store's port; 0 without one.
    // This node waits as a hot spare (called at each such JoinProgress): the runtime may warm
    // up the processes its ranks would start from. May be empty.
    std::function<void()> waiting_as_spare;
  };

  // `options` and `clock` outlive this object.
  RendezvousCoordinator(boost::asio::io_context& io, const LaunchOptions& options,
                        const Clock* clock, Options coordinator_options, Node node, Sink sink);
  ~RendezvousCoordinator() override;

  // The lifecycle the service's messages go to; not owned, outlives this object. Before Open.
  void Bind(NodeLifecycle* lifecycle) { lifecycle_ = lifecycle; }
  // Opens the first session (blocks up to --rdzv-connect-timeout; before the loop runs) and
  // sends this node's join. Errors: the session's; `*exit_status` is the status to exit with.
  absl::Status Open(int* exit_status);

  RestartBackend backend() const override { return RestartBackend::kRendezvous; }
  // This node's NodeReport to the service, with its done mark (after a rejoin when the
  // service is lost).
  void Report(const actions::Report& report) override;
  // The service decides when to stop waiting for other nodes.
  void Interrupt() override {}

  // The endpoints for messages: "a:1" or "a:1,b:2".
  std::string EndpointsText() const;
  // The endpoint of the current session.
  const std::string& endpoint() const { return endpoint_; }
  bool lost() const { return policy_.lost(); }
  // The service's latest assignment (actions::ApplyAssignment applies it).
  const rdzv_v1::Assignment& held() const { return *held_; }
  // `a` is now this node's round; `store` (when not null) is the standby store that serves it,
  // and `next_store_port` the fresh standby store's port to announce (0: none).
  void OnApplied(const rdzv_v1::Assignment& a, std::unique_ptr<store::Server> store,
                 int next_store_port);
  // The previous round's store (if this node served it) has no readers left.
  void ReleaseRoundStore();

  // The lifecycle's done-mark and reconnect actions.
  void MarkDone(int exit_status);
  void PollMarks();
  void PollMarksLater();
  // The run's outcome learned from the done marks without the service: node rank 0 keeps the
  // store until every other node has seen it; the others write their seen mark and finish.
  void FinishFromMarks(int exit_status, const std::string& message);
  // Finish, except that node rank 0, which serves the round's store, when the service is lost
  // first keeps the store until every node's done mark is there (and, with `wait_for_seen`,
  // every other node has seen the outcome), at most --rdzv-conf read_timeout.
  void FinishLinger(int exit_status, const std::string& message, bool wait_for_seen = false);
  void Reconnect() { StartReconnect(closed_status_); }
  // This node leaves the run (actions::LeaveSession): the session closes now, without a report,
  // and no reconnect follows; the service counts the node as lost.
  void Leave();

  // The agent ends: marks still pending are dropped unless the service is lost or this node
  // lingers; timers stop and the session's late callbacks are dropped.
  void Retire();
  // Runs `stop` once the marks wrote what they hold, at most 3 s from now.
  void FlushThen(const std::function<void()>& stop);
  // Drops the marks, joins the reconnect thread and closes every session and the hosted
  // service. Once, while the loop still exists.
  void Shutdown();

 private:
  NodeState state() const { return lifecycle_->state(); }
  void Finish(int exit_status, const std::string& message);
  absl::StatusOr<std::unique_ptr<RendezvousSession>> OpenSession(uint64_t gen,
                                                                 const std::string& endpoint,
                                                                 absl::Duration timeout);
  // Several replicas: opens the first session that connects, trying them in turn until
  // `timeout`. Errors: DeadlineExceeded naming every replica; Unauthenticated when every failure
  // was a TLS disagreement.
  absl::StatusOr<std::unique_ptr<RendezvousSession>> OpenFirstReplica(absl::Duration timeout);
  // The JoinRequest for this node, with JoinRequest.rejoin when it holds a round of the run.
  rdzv_v1::AgentMessage MakeJoin() const;
  std::optional<rdzv_v1::Assignment> RejoinAssignment() const;
  // The service is lost, or a session ended before the service took it: workers keep running
  // and the agent reconnects through the endpoints until --rdzv-conf read_timeout passes.
  void StartReconnect(const grpc::Status& status);
  void ScheduleReconnect(absl::Duration pause);
  void TryReconnect();
  void OnReconnectAttempt(uint64_t gen);
  void OnReconnectWindowOver();
  void ServiceBack();
  void OnRejoined();
  // The service answered this node's rejoin as a fresh join (the run went on without the node and
  // waits for nodes: docs/RENDEZVOUS.md): the service is back, and a new round follows.
  void OnRejoinTakenAsJoin();
  void OnMarks();
  RoundMarks::Round MarksRound() const;
  void OnServiceMessage(const rdzv_v1::ServiceMessage& message);
  void OnSessionClosed(const grpc::Status& status);
  void OnAssignment(const rdzv_v1::Assignment& assignment);
  // Whether the rendezvous service runs inside another node's agent (Assignment.host_node_id).
  bool HostedByAnotherNode() const;
  std::string HostLostMessage(const grpc::Status& status) const;

  boost::asio::io_context& io_;
  const LaunchOptions& options_;
  const Clock* clock_;
  Options config_;
  Node node_;
  Sink sink_;
  NodeLifecycle* lifecycle_ = nullptr;
  boost::asio::steady_timer reconnect_timer_;
  // The session's decisions: generation, reconnect window, standby answers, rejoin.
  SessionPolicy policy_;
  grpc::Status closed_status_;  // How the last session ended (Reconnect logs it).
  replica::EndpointRotation rotation_;
  std::thread reconnect_thread_;  // One connection attempt at a time.
  dgt::Mutex reconnect_mu_;
  std::optional<absl::StatusOr<std::unique_ptr<RendezvousSession>>> reconnect_result_
      ABSL_GUARDED_BY(reconnect_mu_);
  rdzv_v1::Assignment current_assignment_;
  std::optional<rdzv_v1::AgentMessage> last_report_;  // Sent again after a rejoin.
  // Done marks in the round's store, on io_ (no thread).
  RoundMarks marks_;
  std::string endpoint_;  // The endpoint of the current session (rotation_.current()).
  // The "(re)connected to ..." line of a reopened session, logged once the service answers it (a
  // standby answers by ending the session, and is not "connected to").
  std::optional<std::string> announce_;
  // The store serving the current round, when this node is node rank 0.
  std::unique_ptr<store::Server> round_store_;
  std::optional<rdzv_v1::Assignment> held_;
  std::unique_ptr<RendezvousSession> session_;
  // The node whose agent hosts the service in-process (c10d-style), empty for dgt-rendezvous:
  // losing that service means that node is gone.
  std::string host_node_id_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_RENDEZVOUS_COORDINATOR_H_
