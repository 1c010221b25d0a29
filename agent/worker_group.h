// WorkerGroup: starts a node's worker processes and supervises them without polling. Each worker
// leads its own process group, dies with the agent (PR_SET_PDEATHSIG), and has its stdout and
// stderr forwarded line by line to the agent's, prefixed with its rank. A worker's exit is an
// event (a pidfd becoming readable in the agent's io_context).
//
// Thread-compatible: use from the io_context's thread only.
#ifndef DGT_AGENT_WORKER_GROUP_H_
#define DGT_AGENT_WORKER_GROUP_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio.hpp"

namespace dgt::agent {

struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  // argv[0] is resolved against PATH before any fork.
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE".
};

struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  int exit_code = 0;  // When it exited; 0 when killed by a signal.
  int signal = 0;     // Terminating signal, 0 when it exited.
  absl::Time time;
  // Last lines the worker wrote to stderr (at most kStderrTailLines).
  std::deque<std::string> stderr_tail;

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  // "exited with code 3" or "was killed by signal 9 (SIGKILL)".
  std::string Describe() const;
  // The launcher's exit status for this failure: the code, or 128 + signal.
  int ExitStatus() const { return signal != 0 ? 128 + signal : exit_code; }
};

inline constexpr size_t kStderrTailLines = 20;

// Finds `program` in PATH (or checks it, when it contains a '/'). Errors: NotFound.
absl::StatusOr<std::string> ResolveExecutable(const std::string& program);

class WorkerGroup {
 public:
  using ExitCallback = std::function<void(const WorkerExit&)>;

  WorkerGroup(boost::asio::io_context& io, ExitCallback on_exit);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts one process per spec. On error nothing is left running.
  // Errors: NotFound for a missing executable; Internal when fork/pipe fail.
  absl::Status Start(const std::vector<WorkerSpec>& specs);

  // Sends `sig` to the process group of every live worker.
  void Signal(int sig);

  // SIGTERM to every live worker's group, then SIGKILL to the groups still there after `grace`.
  void Stop(absl::Duration grace);

  // SIGKILL to every worker's process group, exited ones included (their leftovers).
  void KillAll();

  int alive() const { return alive_; }
  // True once every worker exited and its output pipes reached EOF.
  bool drained() const { return alive_ == 0 && open_pipes_ == 0; }
  // Runs `callback` once drained() holds (at once if it already does).
  void OnDrained(std::function<void()> callback);

 private:
  struct Worker;
  void WatchExit(Worker& w);
  void Pump(Worker& w, bool is_stderr);
  void PipeClosed();

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int alive_ = 0;
  int open_pipes_ = 0;
  boost::asio::steady_timer kill_timer_;
  std::function<void()> on_drained_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKER_GROUP_H_
