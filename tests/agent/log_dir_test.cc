#include "agent/workers/log_dir.h"

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

// The service takes ids up to 256 bytes; the log directory's name is <id>_XXXXXX (at most 255):
// a longer id was refused only after joining, or failed "File name too long" after the round.
TEST(LogDirTest, LongRunIdsAreRefused) {
  EXPECT_TRUE(ValidateRunId(std::string(128, 'a')).ok());
  for (size_t n : {129, 252, 300}) {
    absl::Status s = ValidateRunId(std::string(n, 'a'));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(s.message(),
              "--rdzv-id must be at most 128 bytes (it also names the log "
              "directory), got " +
                  std::to_string(n));
  }
  // The longest id still names a log directory.
  const fs::path logs = FreshDir("log_dir_long_id");
  auto dir = CreateRunLogDir(logs.string(), std::string(128, 'a'));
  ASSERT_TRUE(dir.ok()) << dir.status();
}

// A newline (or any control character) in the id would split the agent's log lines.
TEST(LogDirTest, RunIdsWithControlCharactersAreRefused) {
  for (const std::string& id : {std::string("a\nb"), std::string("a\tb"), std::string("\x1b[31m"),
                                std::string("x\x7f"), std::string("a\0b", 3)}) {
    absl::Status s = ValidateRunId(id);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(s.message().rfind("--rdzv-id must not contain control characters, got '", 0), 0u)
        << s;
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s;
  }
  EXPECT_EQ(ValidateRunId("a\nb").message(),
            "--rdzv-id must not contain control characters, got 'a\\nb'");
  EXPECT_TRUE(ValidateRunId("job-\xc3\xa9t\xc3\xa9").ok());  // UTF-8 is not a control character.
}

TEST(LogDirTest, CheckLogDirCreatesTheDirectory) {
  const fs::path logs = FreshDir("log_dir_check") / "a" / "b";
  EXPECT_TRUE(CheckLogDir(logs.string()).ok());
  EXPECT_TRUE(fs::is_directory(logs));
  EXPECT_TRUE(CheckLogDir(logs.string()).ok());  // Existing: fine too.
}

TEST(LogDirTest, CheckLogDirNamesTheFlagAndTheReason) {
  absl::Status s = CheckLogDir("/proc/x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--log-dir '/proc/x': cannot create it: No such file or directory") << s;
  const fs::path file = FreshDir("log_dir_check_file");
  fs::create_directories(file.parent_path());
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  s = CheckLogDir(file.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("--log-dir '" + file.string() + "': cannot create it: ", 0), 0u) << s;
  fs::remove(file);
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
