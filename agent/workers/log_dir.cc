#include "agent/workers/log_dir.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/utf8.h"

namespace dgt::agent {
namespace {

absl::StatusOr<std::string> MakeUniqueDir(const std::filesystem::path& parent,
                                          absl::string_view stem) {
  std::error_code ec;
  std::filesystem::path root = std::filesystem::absolute(parent, ec).lexically_normal();
  if (ec) return ErrnoToStatus(ec.value(), absl::StrCat("log directory ", parent.string()));
  std::filesystem::create_directories(root, ec);
  if (ec) return ErrnoToStatus(ec.value(), absl::StrCat("create log directory ", root.string()));
  std::string pattern = (root / absl::StrCat(stem, "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("create log directory ", pattern));
  }
  return pattern;
}

}  // namespace

absl::Status ValidateRunId(absl::string_view run_id) {
  if (run_id.empty() || absl::StrContains(run_id, '/') || absl::StrContains(run_id, "..")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-id must be a non-empty name without '/' or '..' (it also names the "
                     "log directory), got '",
                     run_id, "'"));
  }
  if (run_id.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv-id must be at most ", kMaxRunIdBytes,
                                                   " bytes (it also names the log directory), got ",
                                                   run_id.size()));
  }
  for (char c : run_id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-id must not contain control characters, got '", absl::CHexEscape(run_id), "'"));
    }
  }
  if (const size_t at = FirstInvalidUtf8(run_id); at != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv-id must be UTF-8 text (byte ", at + 1,
                                                   " is not), got '", absl::CHexEscape(run_id),
                                                   "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckLogDir(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (!ec && !std::filesystem::is_directory(log_dir, ec) && !ec) {
    ec = std::make_error_code(std::errc::not_a_directory);
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-dir '", log_dir, "': cannot create it: ", ec.message()));
  }
  if (::access(log_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-dir '", log_dir, "': cannot write in it: ", std::generic_category().message(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CreateRunLogDir(const std::string& log_dir, const std::string& run_id) {
  if (absl::Status s = ValidateRunId(run_id); !s.ok()) return s;
  return MakeUniqueDir(log_dir, absl::StrCat(run_id, "_"));
}

absl::StatusOr<std::string> CreateTempLogDir() {
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return MakeUniqueDir(tmp, "dgt-run-");
}

}  // namespace dgt::agent
