// WorkerExit: how one worker process ended, as the WorkerGroup saw it and the NodeLifecycle
// decides on it. A plain value (no I/O), so the lifecycle's unit tests build exits by hand.
#ifndef DGT_AGENT_WORKERS_WORKER_EXIT_H_
#define DGT_AGENT_WORKERS_WORKER_EXIT_H_

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <string>

#include "absl/time/time.h"

namespace dgt::agent {

struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  int attempt = 0;
  pid_t pid = 0;
  int exit_code = 0;  // When it exited; 0 when killed by a signal.
  int signal = 0;     // Terminating signal, 0 when it exited.
  absl::Time time;
  // Last lines the worker wrote to stderr (at most kStderrTailLines).
  std::deque<std::string> stderr_tail;
  // When the agent killed it as hung: the order in which it was declared (1 for the first,
  // HangMonitor::DeclaredOrder) and when; 0 and InfinitePast otherwise.
  int hang_order = 0;
  absl::Time hung_at = absl::InfinitePast();
  // When it failed, for the run's root cause across nodes: a hung rank failed when it was
  // declared hung (its kill waits for its stacks), any other when it exited.
  absl::Time FailedAt() const { return hang_order > 0 ? hung_at : time; }

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  // "exited with code 3" or "was killed by signal 9 (SIGKILL)".
  std::string Describe() const;
  // The launcher's exit status for this failure: the code, or 128 + signal.
  int ExitStatus() const { return signal != 0 ? 128 + signal : exit_code; }
};

inline constexpr size_t kStderrTailLines = 20;

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_WORKER_EXIT_H_
