#include "daemon/job_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/job_command.h"

namespace dgt::daemon {
namespace {

namespace fs = std::filesystem;

absl::Status CheckArgs(const std::string& job_id, int local_rank, const std::string& stream) {
  if (auto s = ValidateJobId(job_id); !s.ok()) return s;
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("local rank must be >= 0, got ", local_rank));
  }
  if (!stream.empty() && stream != "stdout" && stream != "stderr") {
    return absl::InvalidArgumentError(
        absl::StrCat("stream must be stdout or stderr, got '", stream, "'"));
  }
  return absl::OkStatus();
}

// Opens `path` for reading only if it is a regular file that, resolved, lies under `root/`.
absl::StatusOr<int> OpenUnder(const std::string& root, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  char real[PATH_MAX + 1];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), real, PATH_MAX);
  struct stat st {};
  if (n <= 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      !absl::StartsWith(absl::string_view(real, n), root + "/")) {
    ::close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("log file ", path, " is not a regular file under ", root));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> JobLogFiles(const std::string& work_dir,
                                                     const std::string& job_id, int local_rank,
                                                     const std::string& stream) {
  if (auto s = CheckArgs(job_id, local_rank, stream); !s.ok()) return s;
  const fs::path logs = fs::path(work_dir) / job_id / "logs";
  std::error_code ec;
  // Launch directories <job id>_XXXXXX, oldest first.
  std::vector<std::tuple<fs::file_time_type, std::string>> launches;
  for (const auto& entry : fs::directory_iterator(logs, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, job_id + "_") || !entry.is_directory(ec)) continue;
    launches.emplace_back(entry.last_write_time(ec), entry.path().string());
  }
  std::sort(launches.begin(), launches.end());
  const std::string file = (stream.empty() ? std::string("stdout") : stream) + ".log";
  std::vector<std::string> out;
  for (const auto& [mtime, dir] : launches) {
    std::vector<std::pair<int, std::string>> attempts;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      int n = 0;
      if (!absl::StartsWith(name, "attempt_") ||
          !absl::SimpleAtoi(absl::string_view(name).substr(8), &n)) {
        continue;
      }
      const fs::path f = entry.path() / std::to_string(local_rank) / file;
      if (fs::exists(fs::symlink_status(f, ec))) attempts.emplace_back(n, f.string());
    }
    std::sort(attempts.begin(), attempts.end());
    for (auto& [n, f] : attempts) out.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<LogRead> ReadJobLog(const std::string& work_dir, const std::string& job_id,
                                   int local_rank, const std::string& stream, int64_t offset,
                                   int64_t max_bytes, bool job_finished) {
  if (auto s = CheckArgs(job_id, local_rank, stream); !s.ok()) return s;
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset must be >= 0, got ", offset));
  }
  if (max_bytes <= 0 || max_bytes > kMaxLogChunkBytes) max_bytes = kMaxLogChunkBytes;
  std::error_code ec;
  const fs::path job_dir = fs::path(work_dir) / job_id;
  const fs::path root = fs::canonical(job_dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("no job ", job_id, " on this node"));
  auto files = JobLogFiles(work_dir, job_id, local_rank, stream);
  if (!files.ok()) return files.status();
  if (files->empty() && job_finished) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " has no log for local rank ", local_rank));
  }
  LogRead r;
  int64_t base = 0;  // Offset of the current file's first byte in the concatenation.
  bool at_end = true;
  for (const std::string& f : *files) {
    auto fd = OpenUnder(root.string(), f);
    if (!fd.ok()) return fd.status();
    struct stat st {};
    ::fstat(*fd, &st);
    const int64_t size = st.st_size;
    const int64_t want = max_bytes - static_cast<int64_t>(r.data.size());
    if (want > 0 && offset < base + size) {
      int64_t pos = std::max<int64_t>(offset - base, 0);
      const int64_t n = std::min<int64_t>(want, size - pos);
      const size_t old = r.data.size();
      r.data.resize(old + n);
      int64_t got = 0;
      while (got < n) {
        const ssize_t k = ::pread(*fd, r.data.data() + old + got, n - got, pos + got);
        if (k <= 0) break;
        got += k;
      }
      r.data.resize(old + got);
      if (pos + got < size) at_end = false;
    } else if (want <= 0 && offset < base + size) {
      at_end = false;
    }
    ::close(*fd);
    base += size;
  }
  r.next_offset = offset + static_cast<int64_t>(r.data.size());
  r.eof = job_finished && at_end && r.next_offset >= base;
  return r;
}

}  // namespace dgt::daemon
