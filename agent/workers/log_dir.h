// Where a launch writes its workers' logs and error files (torchrun 2.x layout): each launch gets
// a directory of its own, <log_dir>/<run_id>_<unique>/, so that relaunching with the same
// --log-dir and run id neither overwrites nor mixes runs; under it
// attempt_<n>/<local_rank>/{stdout,stderr}.log and error.json. Without --log-dir a temporary
// $TMPDIR/dgt-run-<unique>/. Paths are absolute: workers get them as TORCHELASTIC_ERROR_FILE and
// may change their working directory.
#ifndef DGT_AGENT_WORKERS_LOG_DIR_H_
#define DGT_AGENT_WORKERS_LOG_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt::agent {

// The longest --rdzv-id, in bytes: the rendezvous service takes up to 256 (RoundStateOptions::
// max_id_bytes), and <run_id>_XXXXXX must fit a file name (255 bytes).
inline constexpr size_t kMaxRunIdBytes = 128;

// Whether `run_id` (--rdzv-id) can name a directory under --log-dir without leaving it, and the
// run in the rendezvous service and log lines: not empty, no '/', no "..", at most
// kMaxRunIdBytes, no control characters (a newline would split log lines), valid UTF-8 (protobuf
// refuses to send anything else). Refused rather than
// rewritten: the id is also the rendezvous key every node must agree on.
// Errors: InvalidArgument naming --rdzv-id and the value (control characters escaped).
absl::Status ValidateRunId(absl::string_view run_id);

// Checks --log-dir before the agent joins a run, so that a bad one is a usage error then and not
// a failure after the round formed: creates `log_dir` when missing and checks that it is a
// directory this process can create entries in.
// Errors: InvalidArgument naming --log-dir, the path and the reason.
absl::Status CheckLogDir(const std::string& log_dir);

// Creates <log_dir>/<run_id>_XXXXXX (mkdtemp; `log_dir` is created when missing and made
// absolute against the working directory) and returns its absolute path.
// Errors: InvalidArgument for a refused run id; the errno's status (PermissionDenied, ...) when a
// directory cannot be created, naming the path.
absl::StatusOr<std::string> CreateRunLogDir(const std::string& log_dir, const std::string& run_id);

// Creates $TMPDIR/dgt-run-XXXXXX (/tmp without TMPDIR) and returns its absolute path.
// Errors: as CreateRunLogDir.
absl::StatusOr<std::string> CreateTempLogDir();

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_LOG_DIR_H_
