#include "agent/workers/worker_exit.h"

#include <string.h>

#include "absl/strings/str_cat.h"

namespace dgt::agent {

std::string WorkerExit::Describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return absl::StrCat("was killed by signal ", signal, " (SIG", name ? name : "?", ")");
  }
  return absl::StrCat("exited with code ", exit_code);
}

}  // namespace dgt::agent
