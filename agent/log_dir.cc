#include "agent/log_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

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
