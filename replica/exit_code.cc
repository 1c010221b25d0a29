#include "replica/exit_code.h"

namespace dgt::replica {

int ExitCodeFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitSuccess;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return kExitRendezvousUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitNotAdmitted;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitLauncherError;
  }
}

}  // namespace dgt::replica
