#include "run_status/run_status.h"

namespace dgt::rendezvous {

const char* RunStateName(RunState state) {
  switch (state) {
    case RunState::kGathering:
      return "gathering";
    case RunState::kRunning:
      return "running";
    case RunState::kClosed:
      return "closed";
  }
  return "?";
}

}  // namespace dgt::rendezvous
