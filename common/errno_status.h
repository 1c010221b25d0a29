// The one place errno becomes an absl::Status.
#ifndef DGT_COMMON_ERRNO_STATUS_H_
#define DGT_COMMON_ERRNO_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dgt {

// Returns a Status for `err` (an errno value) with the message "<what>: <strerror>".
// ECONNREFUSED, EHOSTUNREACH, ENETUNREACH and ETIMEDOUT map to Unavailable; ENOENT to NotFound;
// EACCES/EPERM to PermissionDenied; EINVAL to InvalidArgument; EADDRINUSE to AlreadyExists;
// others to Internal.
absl::Status ErrnoToStatus(int err, absl::string_view what);

}  // namespace dgt

#endif  // DGT_COMMON_ERRNO_STATUS_H_
