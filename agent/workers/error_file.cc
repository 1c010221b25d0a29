#include "agent/workers/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"

namespace dgt::agent {

std::optional<WorkerError> ParseTorchErrorFile(absl::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  const nlohmann::json& m = j["message"];
  WorkerError e;
  if (m.is_string()) {
    e.message = m.get<std::string>();
    return e;
  }
  if (!m.is_object()) return std::nullopt;
  if (m.contains("message") && m["message"].is_string()) e.message = m["message"];
  if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
    const nlohmann::json& extra = m["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      e.traceback = extra["py_callstack"];
    }
    if (extra.contains("timestamp")) {
      const nlohmann::json& ts = extra["timestamp"];
      if (ts.is_number_integer()) {
        e.timestamp = ts.get<int64_t>();
      } else if (ts.is_string()) {
        int64_t v = 0;
        if (absl::SimpleAtoi(ts.get<std::string>(), &v)) e.timestamp = v;
      }
    }
  }
  return e;
}

std::optional<WorkerError> ReadTorchErrorFile(const std::string& path) {
  // The path is the worker's to fill: it may have put a FIFO there (opening one blocks until a
  // writer comes; reading one until it closes), a device, or a huge file. Non-blocking open,
  // regular files only, at most kMaxErrorFileBytes read.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st = {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxErrorFileBytes) {
    ::close(fd);
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(kMaxErrorFileBytes) + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  if (have > static_cast<size_t>(kMaxErrorFileBytes)) return std::nullopt;  // Grew meanwhile.
  text.resize(have);
  return ParseTorchErrorFile(text);
}

}  // namespace dgt::agent
