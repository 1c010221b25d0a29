#include "agent/error_file.h"

#include <fstream>
#include <sstream>

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
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(1 << 20, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.gcount() == static_cast<std::streamsize>(text.size())) return std::nullopt;
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseTorchErrorFile(text);
}

}  // namespace dgt::agent
