// The job spec of `dgt submit JOB.yaml` (dgt.jobs.v1.JobSpec; docs/JOBS.md): the YAML file read
// into the proto, and the one validation that both the CLI (before sending) and the jobs service
// (on Submit) run, so the two cannot disagree. The YAML keys are the JobSpec field names, as in an
// Azure ML `command` job's YAML (instance_count, distribution.process_count_per_instance, ...).
//
// Errors name the key path and the value: "distribution.process_count_per_instance: must be >= 1,
// got 0". The CLI prefixes the file name ("job.yaml: ...").
//
// Thread-safety: free functions, thread-safe.
#ifndef DGT_JOBS_JOB_SPEC_H_
#define DGT_JOBS_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dgt/jobs/v1/jobs.pb.h"

namespace dgt::jobs {

// Limits of a spec (Validate).
inline constexpr size_t kMaxNameBytes = 128;
inline constexpr int32_t kMaxInstanceCount = 100000;  // The rendezvous' max_nodes_per_run.
inline constexpr int32_t kMaxProcessesPerInstance = 4096;
inline constexpr int32_t kMaxRestarts = 100000;
// Spares wait in the run: the rendezvous' --max-waiting-nodes-per-run default.
inline constexpr int32_t kMaxSpareInstances = 1000;
// A job id: "job-<n>" or any [a-z0-9-] string of at most this many bytes (it becomes the
// rendezvous run id and a directory name on every node).
inline constexpr size_t kMaxJobIdBytes = 64;

// The most bytes of a job file ReadJobSpecFile reads (1 MiB): `dgt submit /dev/zero` stops there.
inline constexpr int64_t kMaxJobFileBytes = 1 << 20;

// Reads the job file at `path` (the text for ParseJobSpecYaml), at most kMaxJobFileBytes bytes.
// Errors (InvalidArgument): "cannot read the job file <path>: <strerror>", "<path>: is a
// directory, not a job file", "<path>: larger than 1048576 bytes, the limit of a job file".
absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path);

// Reads a job spec from YAML text. Keys absent from the text keep the proto defaults, except
// distribution.process_count_per_instance, which defaults to 1 (as Azure ML's). Errors:
// InvalidArgument naming the key path for an unknown key, a value of the wrong type (a map where a
// string is due, "two" for an integer), an integer beyond int32 (with the key's range), text that
// is not YAML (with the line), text that starts with a UTF-16 or UTF-32 byte-order mark, and,
// before the YAML is read, invalid UTF-8 or a raw NUL byte anywhere in the text (with the line,
// the column in characters and the byte offset: "not UTF-8: byte 0xE9 at line 1, column 18 (byte
// 17); a job file must be UTF-8"). The result is not yet validated: call Validate.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view text);

// Checks every rule of the JobSpec comments (jobs.proto), in this order:
// - command required; no NUL byte and no invalid UTF-8 in any string (command, name, code_dir,
//   distribution.type, restart_policy, environment_variables and node_labels keys and values):
//   protobuf cannot send a string that is not UTF-8.
// - name <= 128 bytes; code_dir absolute.
// - environment variable names [A-Za-z_][A-Za-z0-9_]*; instance_count 1..100000.
// - distribution.type "", "pytorch" or "tensorflow" ("mpi" is refused: dgt-run runs no MPI).
// - process_count_per_instance 1..4096.
// - tensorflow: worker_count >= 1, parameter_server_count >= 0, and their sum equal to
//   instance_count x process_count_per_instance (as dgt-run --worker-count checks).
// - max_restarts 0..100000; restart_policy "", "group" or "rank"; node label keys non-empty.
// - spare_instances 0..1000, and 0 for tensorflow.
// Errors: InvalidArgument for the first rule broken.
absl::Status Validate(const v1::JobSpec& spec);

// Whether `id` is a valid job id (kMaxJobIdBytes, [a-z0-9-], non-empty).
bool ValidJobId(absl::string_view id);

}  // namespace dgt::jobs

#endif  // DGT_JOBS_JOB_SPEC_H_
