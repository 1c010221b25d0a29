// Reading the error file that torch's `@record` decorator writes to TORCHELASTIC_ERROR_FILE
// (torch/distributed/elastic/multiprocessing/errors, checked against torch 1.13):
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}
// Older and C++-side writers put a plain string in "message"; both are accepted.
#ifndef DGT_AGENT_WORKERS_ERROR_FILE_H_
#define DGT_AGENT_WORKERS_ERROR_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dgt::agent {

struct WorkerError {
  std::string message;    // "ValueError: boom".
  std::string traceback;  // py_callstack; may be empty.
  int64_t timestamp = 0;  // Seconds since the epoch; 0 when absent.
};

// Parses the JSON text of an error file. nullopt when it is not one.
std::optional<WorkerError> ParseTorchErrorFile(absl::string_view json);

inline constexpr int64_t kMaxErrorFileBytes = 1 << 20;

// Reads and parses `path`; nullopt when missing, unreadable, not a regular file (a FIFO or a
// device there never blocks the caller), larger than kMaxErrorFileBytes or not valid.
std::optional<WorkerError> ReadTorchErrorFile(const std::string& path);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_ERROR_FILE_H_
