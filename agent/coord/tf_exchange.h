// TfExchange: --distribution tensorflow's TF_CONFIG addresses of this node's rounds. It reserves
// one port per local worker once (bound sockets hold them until the workers start) and, with
// several nodes, exchanges every node's addresses through the round's store (coord/tf_cluster.h),
// one step every 100 ms until all are there or --join-timeout passes. What a step's answer means
// (start, try again, or end the agent with 1, 75 or 77) is DecideTfStep's, a pure function.
//
// Thread-compatible: used from the agent's event loop only.
#ifndef DGT_AGENT_COORD_TF_EXCHANGE_H_
#define DGT_AGENT_COORD_TF_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/coord/done_marks.h"
#include "agent/coord/tf_cluster.h"
#include "agent/lifecycle/restart_policy.h"
#include "boost/asio.hpp"

namespace dgt::agent {

// What the agent does with one step of the exchange.
struct TfStepDecision {
  enum class Kind {
    kStart,        // Every node's addresses are there: start the workers.
    kRetry,        // Some are missing (or the store failed): the next step in 100 ms.
    kFinish,       // End the agent with exit_status and message.
    kFinishLater,  // Node rank 0: end the agent the same way 1 s from now, serving the round's
                   // store meanwhile so that the other nodes read the roles that differ.
  };
  Kind kind = Kind::kRetry;
  int exit_status = 0;
  std::string message;
};

// Where the exchange happens and its bound, for DecideTfStep's messages.
struct TfExchangeRound {
  int node_rank = 0;
  std::string master_addr;  // The round's store.
  int master_port = 0;
  absl::Time deadline;  // The exchange gives up (the round's start + the join timeout).
  double join_timeout_s = 600;
  std::string join_timeout_flag = "--join-timeout";
};

// The decision for `step` at `now`: kStart when nothing is missing; InvalidArgument: kFinish 1
// ("cannot build TF_CONFIG"); FailedPrecondition (roles that differ): 77, kFinishLater on node
// rank 0; past the deadline: kFinish 75 naming the missing node ranks (or the store's error);
// else kRetry.
TfStepDecision DecideTfStep(const absl::StatusOr<TfExchangeStep>& step, absl::Time now,
                            const TfExchangeRound& round);

class TfExchange {
 public:
  struct Options {
    TfRoleConfig roles;
    double join_timeout_s = 600;
    std::string join_timeout_flag = "--join-timeout";
    absl::Duration store_timeout = absl::Seconds(10);  // Each request to the round's store.
  };
  // What the agent says before each step of a round's exchange.
  enum class Gate {
    kGone,      // A later round took over, or the agent is done: the exchange ends silently.
    kStopping,  // The round stops: on_stopping, and the exchange ends.
    kGo,        // Go on.
  };
  struct Callbacks {
    std::function<Gate()> gate;
    std::function<void()> on_ready;     // Every address is known: start the workers.
    std::function<void()> on_stopping;  // The round stopped meanwhile (see Gate).
    std::function<void(int exit_status, const std::string& message)> on_finish;
  };

  // `clock` (not owned) outlives this object.
  TfExchange(boost::asio::io_context& io, Options options, const Clock* clock);
  // Closes the reserved ports and drops the store client.
  ~TfExchange();
  TfExchange(const TfExchange&) = delete;
  TfExchange& operator=(const TfExchange&) = delete;

  // Reserves one free port per local worker (`nproc`) on `address` (loopback when it is not an
  // IPv4 address), kept for every round. Errors: Internal when a socket cannot be bound.
  absl::Status ReservePorts(const std::string& address, int nproc);
  // The current round's addresses by global rank (TF_CONFIG's cluster); empty while exchanging.
  const std::vector<std::string>& addresses() const { return addresses_; }
  // One node: this node's addresses are the cluster.
  void UseLocalAddresses() { addresses_ = local_addresses_; }
  // Closes the reserved ports: the workers bind them now. Later rounds use the same ports, free
  // again once this round's workers are gone.
  void ReleasePorts();
  // Several nodes: exchanges the addresses of round `round` (0 for the static backend) through
  // the store at master_addr:master_port; `callbacks` answer.
  void Start(int64_t round, int node_rank, int node_count, const std::string& master_addr,
             int master_port, Callbacks callbacks);
  // Stops the exchange: no callback runs after this.
  void Stop();

 private:
  // Whether the exchange of `generation` goes on (the caller's Gate; on_stopping when not).
  bool Proceed(uint64_t generation);
  void Poll(uint64_t generation);
  void OnStep(uint64_t generation, const absl::StatusOr<TfExchangeStep>& step);

  Options options_;
  const Clock* clock_;
  std::vector<std::string> addresses_;
  std::vector<std::string> local_addresses_;  // This node's, by local rank (kept all run).
  std::vector<int> reservations_;             // Sockets holding those ports until the start.
  RoundStoreClient client_;                   // The exchange's store calls.
  boost::asio::steady_timer timer_;           // Between exchange steps.
  // The round being exchanged; steps of an earlier Start carry an older generation.
  uint64_t generation_ = 0;
  int64_t round_ = 0;
  int node_count_ = 1;
  TfExchangeRound where_;
  Callbacks callbacks_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_TF_EXCHANGE_H_
