// Agent: one node of a job. Joins the run at the rendezvous service, hosts the job's store when it
// is node rank 0, starts and supervises this node's workers with the env contract, and reports
// the outcome. The same class backs `dgt-run` (foreground) and, later, the daemon.
//
// Everything happens on one event loop (boost::asio): rendezvous messages, worker exits, worker
// output, signals and timers. Thread-compatible: Run() once, from one thread.
#ifndef DGT_AGENT_AGENT_H_
#define DGT_AGENT_AGENT_H_

#include <memory>
#include <optional>
#include <string>

#include "agent/launch_options.h"
#include "agent/rendezvous_session.h"
#include "agent/worker_env.h"
#include "agent/worker_group.h"
#include "boost/asio.hpp"
#include "dgt/store/server.h"
#include "rendezvous/service.h"

namespace dgt::agent {

class Agent {
 public:
  explicit Agent(LaunchOptions options);
  ~Agent();

  // Runs the job on this node to its end. Returns the process exit status: 0 when every worker
  // of the run succeeded, else the first failed worker's code (128 + signal number for a
  // signal), 1 for a rendezvous failure, 128 + N when stopped by signal N.
  int Run();

 private:
  enum class State { kJoining, kRunning, kStopping, kAwaitingOutcome, kDone };

  absl::Status Prepare();
  void OnServiceMessage(const rdzv_v1::ServiceMessage& message);
  void OnSessionClosed(const grpc::Status& status);
  void OnAssignment(const rdzv_v1::Assignment& assignment);
  void OnRunFinished(const rdzv_v1::RunFinished& finished);
  void OnWorkerExit(const WorkerExit& exit);
  void OnSignal(int sig);
  void StopWorkers();
  void AfterWorkersExited();
  void Finish(int exit_status, const std::string& message);
  std::string DescribeFailure(const WorkerExit& exit) const;
  void WaitForSignals();

  LaunchOptions options_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer join_timer_;
  boost::asio::steady_timer drain_timer_;
  State state_ = State::kJoining;
  int exit_status_ = 1;

  std::unique_ptr<rendezvous::RendezvousServer> embedded_rendezvous_;
  std::string rdzv_endpoint_;
  std::string advertised_address_;
  std::unique_ptr<store::Server> store_;
  std::unique_ptr<RendezvousSession> session_;
  bool session_open_ = false;
  std::unique_ptr<WorkerGroup> workers_;
  NodeAssignment assignment_;
  rdzv_v1::JoinProgress last_progress_;

  std::optional<WorkerExit> first_failure_;
  std::optional<rdzv_v1::RunFinished> remote_outcome_;
  int stop_signal_ = 0;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_H_
