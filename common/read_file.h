// Reading a small input file (a job file, a config file) with a size limit, so that
// `dgt submit /dev/zero` cannot grow without bound and a directory is told apart from a file.
// Thread-safe (no shared state).
#ifndef DGT_COMMON_READ_FILE_H_
#define DGT_COMMON_READ_FILE_H_

#include <cstdint>
#include <string>

namespace dgt {

// What ReadFileUpTo found. Each caller words its own message from it.
struct CappedRead {
  enum class Outcome {
    kOk,          // `text` holds the whole file.
    kDirectory,   // `path` is a directory.
    kUnreadable,  // It could not be opened or read; `error` is the errno.
    kTooLarge,    // It holds more than `max_bytes` bytes.
  };
  Outcome outcome = Outcome::kOk;
  std::string text;
  int error = 0;
};

// Reads the file at `path` if it holds at most `max_bytes` bytes. Reads at most
// `max_bytes` + 1 bytes of it (one past the limit tells a file at the limit from a longer one),
// in chunks, so a small file costs no `max_bytes` buffer.
CappedRead ReadFileUpTo(const std::string& path, int64_t max_bytes);

}  // namespace dgt

#endif  // DGT_COMMON_READ_FILE_H_
