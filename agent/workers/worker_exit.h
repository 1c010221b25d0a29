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

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  // "exited with code 3" or "was killed by signal 9 (SIGKILL)".
  std::string Describe() const;
  // The launcher's exit status for this failure: the code, or 128 + signal.
  int ExitStatus() const { return signal != 0 ? 128 + signal : exit_code; }
};

inline constexpr size_t kStderrTailLines = 20;

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_WORKER_EXIT_H_
