// StaticCoordinator: the `--rdzv-backend=static` multi-node job without a rendezvous service, as
// torchrun's static backend: every node knows --nnodes, --node-rank and
// --master-addr:--master-port; node rank 0's agent hosts the job's store there. Agents coordinate
// through that store (torch 1.x TCPStore frames, so any TCPStore-compatible server would do), under
// the keys common/store_keys.h defines (keys::Static*Key):
//   dgt/static/<run_id>/failed           "<exit status> <message>", set by the first node whose
//                                        workers failed; every agent WAITs on it and stops its
//                                        workers when it appears.
//   dgt/static/<run_id>/joined/<node rank> "1", set by each node once it reached the store.
//   dgt/static/<run_id>/done/<node rank> "<exit status>", set by each node when its workers ended.
//   dgt/static/<run_id>/alive/<node rank> a counter, set by each node rank > 0 every
//                                        heartbeat_period over its control connection.
// Node rank 0 keeps the store until every node is done (bounded by a deadline); a node that never
// joined or never reported by then makes the run fail, and so does a node that reported a
// failure (its exit status and message, through the failure callback). A stop signal ends that
// wait at once.
// Node rank 0 also reads every joined node's alive key each heartbeat_period: a node whose key
// stopped changing for peer_lost_after and that never reported done lost its agent (killed, or
// cut off from node rank 0); node rank 0 then publishes the failure (kExitRendezvousUnavailable
// naming that node rank), so every node stops its workers, and stops waiting for the others. A
// heartbeat, not the store connection's close, so that the store stays plain TCPStore; an agent
// that is alive but busy still writes one small frame a second from its event loop.
// Without node rank 0 nobody would report the run's outcome: another node whose watch connection
// to node rank 0's store breaks tries to reconnect for reconnect_timeout (the same store: its own
// joined key is still there) and otherwise reports a failure with kExitRendezvousUnavailable
// naming node rank 0 and its address.
//
// Thread-compatible: use from the io_context's thread only.
#ifndef DGT_AGENT_COORD_STATIC_COORDINATOR_H_
#define DGT_AGENT_COORD_STATIC_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio.hpp"
#include "dgt/store/async_client.h"

namespace dgt::agent {

class StaticCoordinator {
 public:
  struct Options {
    std::string run_id;
    int node_rank = 0;
    int node_count = 1;
    std::string master_addr;  // IP.
    int master_port = 0;
    absl::Duration connect_timeout = absl::Seconds(30);
    absl::Duration finish_timeout = absl::Seconds(600);  // Node 0's wait for the others.
    // Node rank > 0: how long to try reaching node rank 0's store again once the connection
    // that watches it broke, before the run fails.
    absl::Duration reconnect_timeout = absl::Seconds(3);
    // Node rank > 0 refreshes its alive key this often; node rank 0 reads them as often and
    // declares a node lost whose key did not change for peer_lost_after.
    absl::Duration heartbeat_period = absl::Seconds(1);
    absl::Duration peer_lost_after = absl::Seconds(5);
  };
  // `stopped_by_signal`: the failed node's agent was stopped by an outside signal
  // (ReportStopped), not by a failure.
  using FailureCallback =
      std::function<void(int exit_status, const std::string& message, bool stopped_by_signal)>;

  StaticCoordinator(boost::asio::io_context& io, Options options);
  ~StaticCoordinator();

  // Connects to the store and starts watching for another node's failure (`on_failure`, with
  // that node's exit status and message), or on node rank > 0 for node rank 0's store going
  // away (`on_failure` with kExitRendezvousUnavailable).
  void Start(const std::function<void(absl::Status)>& connected, const FailureCallback& on_failure);

  // This node's workers ended with `exit_status` (0 = success). Publishes it (and the failure,
  // when it is the first); then `done` runs, on node rank 0 once every node is done (Ok; when
  // another node reported a non-zero status, the failure callback ran first with it) or the
  // finish timeout passed (DeadlineExceeded naming the node ranks that never joined or never
  // reported), or at once (Cancelled) after Interrupt().
  void Report(int exit_status, const std::string& message, std::function<void(absl::Status)> done);

  // As Report, for this node's agent stopped by signal `signal_name` ("SIGTERM"): the others
  // must not take the signal's status as theirs (a scheduler would think them preempted). They
  // fail with kExitLauncherError and "node rank <R> was stopped by <signal>".
  void ReportStopped(const std::string& signal_name, std::function<void(absl::Status)> done);

  // As Report, for this node leaving the run after its health check failed (`message` names the
  // check and its reason): the others were healthy, so they fail as for another node's failure
  // without a worker code, with kExitLauncherError and "node rank <R> left the run: <message>",
  // not with kExitNodeUnhealthy.
  void ReportUnhealthy(const std::string& message, std::function<void(absl::Status)> done);

  // A stop signal: node rank 0 stops waiting for the other nodes (a pending Report's `done`
  // runs once this node's writes went out), and later Reports do not wait either.
  void Interrupt();

 private:
  // "<hostname>:<pid>:<unix ns>": identifies this agent's claim of its node rank.
  static std::string ClaimToken();
  // Runs the pending Report's `done` once (no-op when none is pending).
  void Complete(absl::Status status);
  // After the finish timeout: asks the store which nodes never joined or reported.
  void DescribeMissing();
  // Node rank 0, every node done: reports the first other node whose status is not 0 through
  // the failure callback, then completes the pending Report.
  void CheckOthersSucceeded(int next);
  // A client of node rank 0's store (torch 1.x frames, keys behind '/').
  std::unique_ptr<store::AsyncClient> NewClient();
  // WAITs for the failed key on `conn`.
  void Watch(store::AsyncClient* conn);
  // The watch connection to node rank 0's store broke (`why`): reconnect, bounded.
  void OnWatchLost(const std::string& why);
  // One reconnect attempt (a connect, then a check of this node's joined key) until `deadline`.
  void Reconnect(const std::string& broke, absl::Time deadline);
  // Node rank 0 is gone: the failure callback with kExitRendezvousUnavailable.
  void Lost(const std::string& detail);
  // Publishes this node's outcome: `failed` (empty: none) and its done key's value.
  void Publish(const std::string& failed, const std::string& done_value,
               std::function<void(absl::Status)> done);
  // Node rank > 0: sets the alive key, then again every heartbeat_period.
  void Heartbeat();
  // Node rank 0: reads the alive keys of node ranks `next`.., then again after heartbeat_period.
  void CheckPeers(int next);
  // Node rank 0: node rank `rank`'s agent is gone. Publishes the failure and ends the wait.
  void PeerLost(int rank);

  struct Peer {
    std::string last;    // The alive key's last value read; empty: not seen yet.
    absl::Time changed;  // When `last` last changed.
    bool done = false;   // Reported done: no longer watched.
  };

  boost::asio::io_context& io_;
  Options options_;
  // Connections to node rank 0's store: `watch_` WAITs for the failed key (a WAIT holds back the
  // requests behind it), `control_` writes this node's keys, `probe_` tells which nodes are
  // missing after the finish timeout, `monitor_` (node rank 0) reads the alive keys.
  std::unique_ptr<store::AsyncClient> watch_;
  std::unique_ptr<store::AsyncClient> control_;
  std::unique_ptr<store::AsyncClient> probe_;
  std::unique_ptr<store::AsyncClient> monitor_;
  boost::asio::steady_timer finish_timer_;
  boost::asio::steady_timer reconnect_timer_;
  boost::asio::steady_timer heartbeat_timer_;
  // Holds another node's stop by a signal for kStoppedPeerGrace (Watch).
  boost::asio::steady_timer stopped_peer_timer_;
  // Expires with this coordinator: a timer handler whose wait completed before the destructor's
  // cancel() is already queued on the io_context and runs afterwards, so every timer handler is
  // wrapped by Guarded() and does nothing once this is gone (ASan: heap-use-after-free in
  // Heartbeat() when a finished peer's coordinator was destroyed mid-period).
  std::shared_ptr<char> life_ = std::make_shared<char>();
  template <typename F>
  auto Guarded(F handler) {
    return [life = std::weak_ptr<char>(life_),
            handler = std::move(handler)](boost::system::error_code ec) mutable {
      if (!life.expired()) handler(ec);
    };
  }
  std::vector<Peer> peers_;
  uint64_t beats_ = 0;
  bool peer_lost_ = false;
  std::function<void(absl::Status)> pending_done_;
  FailureCallback on_failure_;
  bool interrupted_ = false;
  bool lost_ = false;
  bool closing_ = false;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_STATIC_COORDINATOR_H_
