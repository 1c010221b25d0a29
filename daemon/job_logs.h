// A rank's log as the jobs service's ReadLog sees it: dgt-run's per-attempt files
// <work_dir>/<job id>/logs/<job id>_*/attempt_<n>/<local_rank>/{stdout,stderr}.log (agent/log_dir.h
// layout), concatenated oldest first (launch directories by modification time, then attempts by
// number), read at a byte offset. No path from a request is trusted: the id is checked, the rank
// is a number, the stream one of two names, and every file opened must still lie under the job
// directory after symlinks are resolved (a job may not make the daemon read another file).
// Thread-compatible free functions.
#ifndef DGT_DAEMON_JOB_LOGS_H_
#define DGT_DAEMON_JOB_LOGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dgt::daemon {

// The most one read returns, in bytes (ReadLogRequest.max_bytes' cap and its 0 default).
inline constexpr int64_t kMaxLogChunkBytes = 1 << 20;

struct LogRead {
  std::string data;
  int64_t next_offset = 0;  // offset + data.size()
  bool eof = false;         // job_finished and data reached the end of the last file.
};

// Reads up to `max_bytes` (<= 0 or more than kMaxLogChunkBytes: kMaxLogChunkBytes) of local rank
// `local_rank`'s `stream` ("stdout", or "" for it; "stderr") of job `job_id` from `offset`
// (bytes). An offset past the end returns no data.
// Errors: InvalidArgument for a bad id, stream, rank or a negative offset; NotFound for a job
// without a directory, or a finished job with no log for that rank; PermissionDenied for a file
// that resolves outside the job directory.
absl::StatusOr<LogRead> ReadJobLog(const std::string& work_dir, const std::string& job_id,
                                   int local_rank, const std::string& stream, int64_t offset,
                                   int64_t max_bytes, bool job_finished);

// The files ReadJobLog concatenates, in order (absolute paths; empty when none exist yet).
// Errors: as ReadJobLog's argument checks.
absl::StatusOr<std::vector<std::string>> JobLogFiles(const std::string& work_dir,
                                                     const std::string& job_id, int local_rank,
                                                     const std::string& stream);

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_JOB_LOGS_H_
