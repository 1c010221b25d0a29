#include "replica/exit_code.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::replica {
namespace {

// docs/EXIT_CODES.md: the values schedulers match on.
TEST(ExitCodeTest, TheCodes) {
  EXPECT_EQ(kExitSuccess, 0);
  EXPECT_EQ(kExitLauncherError, 1);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(kExitRendezvousUnavailable, 69);
  EXPECT_EQ(kExitJoinTimeout, 75);
  EXPECT_EQ(kExitNotAdmitted, 77);
}

// Every status code, as the table in exit_code.h.
TEST(ExitCodeTest, EveryStatusCode) {
  const std::vector<std::pair<absl::StatusCode, int>> table = {
      {absl::StatusCode::kOk, 0},
      {absl::StatusCode::kCancelled, 69},
      {absl::StatusCode::kUnknown, 1},
      {absl::StatusCode::kInvalidArgument, 2},
      {absl::StatusCode::kDeadlineExceeded, 69},
      {absl::StatusCode::kNotFound, 1},
      {absl::StatusCode::kAlreadyExists, 1},
      {absl::StatusCode::kPermissionDenied, 77},
      {absl::StatusCode::kResourceExhausted, 1},
      {absl::StatusCode::kFailedPrecondition, 1},
      {absl::StatusCode::kAborted, 1},
      {absl::StatusCode::kOutOfRange, 1},
      {absl::StatusCode::kUnimplemented, 1},
      {absl::StatusCode::kInternal, 1},
      {absl::StatusCode::kUnavailable, 69},
      {absl::StatusCode::kDataLoss, 1},
      {absl::StatusCode::kUnauthenticated, 77},
  };
  for (const auto& [code, exit_code] : table) {
    EXPECT_EQ(ExitCodeFor(code), exit_code) << absl::StatusCodeToString(code);
    EXPECT_EQ(ExitCodeFor(absl::Status(code, code == absl::StatusCode::kOk ? "" : "x")), exit_code);
  }
}

}  // namespace
}  // namespace dgt::replica
