#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace dgt {

CappedRead ReadFileUpTo(const std::string& path, int64_t max_bytes) {
  CappedRead r;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    r.outcome = CappedRead::Outcome::kDirectory;
    return r;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.outcome = CappedRead::Outcome::kUnreadable;
    r.error = errno;
    return r;
  }
  const auto limit = static_cast<size_t>(max_bytes) + 1;
  char chunk[64 * 1024];
  while (r.text.size() < limit) {
    const ssize_t n = ::read(fd, chunk, std::min(sizeof(chunk), limit - r.text.size()));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      r.outcome = CappedRead::Outcome::kUnreadable;
      r.error = errno;
      r.text.clear();
      ::close(fd);
      return r;
    }
    r.text.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  if (r.text.size() > static_cast<size_t>(max_bytes)) {
    r.outcome = CappedRead::Outcome::kTooLarge;
    r.text.clear();
  }
  return r;
}

}  // namespace dgt
