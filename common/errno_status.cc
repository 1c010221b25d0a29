#include "common/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dgt {

absl::Status ErrnoToStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ETIMEDOUT:
    case ECONNRESET:
      return absl::UnavailableError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case EADDRINUSE:
      return absl::AlreadyExistsError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace dgt
