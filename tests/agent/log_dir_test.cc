#include "agent/log_dir.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

namespace fs = std::filesystem;

fs::path FreshDir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / name;
  fs::remove_all(p);
  return p;
}

TEST(LogDirTest, EachLaunchGetsItsOwnDirectory) {
  const fs::path logs = FreshDir("log_dir_each");
  auto a = CreateRunLogDir(logs.string(), "job");
  auto b = CreateRunLogDir(logs.string(), "job");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  for (const std::string& dir : {*a, *b}) {
    EXPECT_TRUE(fs::is_directory(dir)) << dir;
    EXPECT_EQ(fs::path(dir).parent_path(), logs) << dir;
    const std::string name = fs::path(dir).filename().string();
    EXPECT_EQ(name.rfind("job_", 0), 0u) << name;
    EXPECT_EQ(name.size(), std::string("job_").size() + 6) << name;
  }
}

TEST(LogDirTest, RelativeLogDirBecomesAbsolute) {
  const fs::path base = FreshDir("log_dir_relative");
  fs::create_directories(base);
  const fs::path cwd = fs::current_path();
  fs::current_path(base);
  auto dir = CreateRunLogDir("sub/../logs", "job");
  fs::current_path(cwd);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(fs::path(*dir).parent_path(), fs::canonical(base) / "logs");
}

TEST(LogDirTest, RunIdsThatLeaveTheLogDirAreRefused) {
  const fs::path logs = FreshDir("log_dir_escape");
  for (const char* id : {"../escape", "a/b", "..", "", "x..y"}) {
    absl::Status s = ValidateRunId(id);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(s.message(),
              std::string("--rdzv-id must be a non-empty name without '/' or '..' (it also names "
                          "the log directory), got '") +
                  id + "'");
    EXPECT_EQ(CreateRunLogDir(logs.string(), id).status(), s) << id;
  }
  EXPECT_FALSE(fs::exists(logs));
  for (const char* id : {"job", "none", "standalone-1a2b3c4d", "a.b-c_d:1"}) {
    EXPECT_TRUE(ValidateRunId(id).ok()) << id;
  }
}

TEST(LogDirTest, UnwritableParentNamesThePath) {
  auto dir = CreateRunLogDir("/proc/dgt-log-dir-test", "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("/proc/dgt-log-dir-test"), std::string::npos)
      << dir.status();
}

TEST(LogDirTest, TemporaryDirectoryUnderTmpdir) {
  const fs::path tmp = FreshDir("log_dir_tmp");
  fs::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto dir = CreateTempLogDir();
  if (old != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(fs::path(*dir).parent_path(), tmp);
  EXPECT_EQ(fs::path(*dir).filename().string().rfind("dgt-run-", 0), 0u);
}

}  // namespace
}  // namespace dgt::agent
