// Where a launch writes its workers' logs and error files (torchrun 2.x layout): each launch gets
// a directory of its own, <log_dir>/<run_id>_<unique>/, so that relaunching with the same
// --log-dir and run id neither overwrites nor mixes runs; under it
// attempt_<n>/<local_rank>/{stdout,stderr}.log and error.json. Without --log-dir a temporary
// $TMPDIR/dgt-run-<unique>/. Paths are absolute: workers get them as TORCHELASTIC_ERROR_FILE and
// may change their working directory.
#ifndef DGT_AGENT_LOG_DIR_H_
#define DGT_AGENT_LOG_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt::agent {

// Whether `run_id` (--rdzv-id) can name a directory under --log-dir without leaving it: not
// empty, no '/', no "..". Refused rather than rewritten: the id is also the rendezvous key every
// node must agree on. Errors: InvalidArgument naming --rdzv-id and the value.
absl::Status ValidateRunId(absl::string_view run_id);

// Creates <log_dir>/<run_id>_XXXXXX (mkdtemp; `log_dir` is created when missing and made
// absolute against the working directory) and returns its absolute path.
// Errors: InvalidArgument for a refused run id; the errno's status (PermissionDenied, ...) when a
// directory cannot be created, naming the path.
absl::StatusOr<std::string> CreateRunLogDir(const std::string& log_dir, const std::string& run_id);

// Creates $TMPDIR/dgt-run-XXXXXX (/tmp without TMPDIR) and returns its absolute path.
// Errors: as CreateRunLogDir.
absl::StatusOr<std::string> CreateTempLogDir();

}  // namespace dgt::agent

#endif  // DGT_AGENT_LOG_DIR_H_
