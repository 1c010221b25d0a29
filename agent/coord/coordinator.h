// Coordinator: the agent's side of what decides rounds and outcomes across nodes — a rendezvous
// service (c10d, --standalone; the Session stream) or the static backend (no service; node rank
// 0's store, agent/coord/static_coordinator.h). The Agent starts one and hands its answers to the
// NodeLifecycle as events; the lifecycle's coordinator actions (Report, InterruptCoordinator)
// come back here, so that agent code has no per-backend branch.
//
// Thread-compatible: used from the agent's event loop only.
#ifndef DGT_AGENT_COORD_COORDINATOR_H_
#define DGT_AGENT_COORD_COORDINATOR_H_

#include <functional>
#include <memory>
#include <utility>

#include "agent/coord/static_coordinator.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "agent/lifecycle/restart_policy.h"
#include "boost/asio.hpp"

namespace dgt::agent {

class Coordinator {
 public:
  // Where a coordinator's answers go: the runtime hands them to its NodeLifecycle and carries out
  // the actions returned.
  using Sink = std::function<void(const LifecycleActions&)>;

  virtual ~Coordinator() = default;
  // Who starts a group restart's round (RestartTracker's table).
  virtual RestartBackend backend() const = 0;
  // actions::Report: this node's workers are done (exit status, the failure, or the stopping
  // signal); the run's outcome comes back as NodeLifecycle events.
  virtual void Report(const actions::Report& report) = 0;
  // actions::InterruptCoordinator: a signal stops this node; stop waiting for the others.
  virtual void Interrupt() = 0;
};

// The static backend (--rdzv-backend=static with several nodes) as a Coordinator: its start,
// another node's failure and its answer to this node's report become NodeLifecycle events.
class StaticBackend final : public Coordinator {
 public:
  // `lifecycle` is not owned and outlives this object.
  StaticBackend(boost::asio::io_context& io, StaticCoordinator::Options options,
                NodeLifecycle* lifecycle, Sink sink);

  RestartBackend backend() const override { return RestartBackend::kStatic; }
  // Connects to node rank 0's store (this node hosts it when it is node rank 0): every node
  // there is NodeLifecycle::OnStaticStarted; another node's failure, OnStaticRemoteFailure.
  void Start();
  void Report(const actions::Report& report) override;
  void Interrupt() override { coordinator_.Interrupt(); }

 private:
  StaticCoordinator coordinator_;
  NodeLifecycle* lifecycle_;
  Sink sink_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_COORDINATOR_H_
