#include "daemon/job_logs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::daemon {
namespace {

namespace fs = std::filesystem;

class JobLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt-logs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    work_ = tmpl;
  }
  void TearDown() override { fs::remove_all(work_); }

  // Writes <work>/job-1/logs/<launch>/attempt_<n>/<rank>/<stream>.log.
  void Put(const std::string& launch, int attempt, int rank, const std::string& stream,
           const std::string& text) {
    const fs::path dir = fs::path(work_) / "job-1" / "logs" / launch /
                         ("attempt_" + std::to_string(attempt)) / std::to_string(rank);
    fs::create_directories(dir);
    std::ofstream(dir / (stream + ".log"), std::ios::binary) << text;
  }

  std::string work_;
};

TEST_F(JobLogsTest, AttemptsConcatenatedInNumericOrder) {
  Put("job-1_abc", 0, 0, "stdout", "a0\n");
  Put("job-1_abc", 1, 0, "stdout", "a1\n");
  Put("job-1_abc", 10, 0, "stdout", "a10\n");
  Put("job-1_abc", 2, 0, "stdout", "a2\n");
  Put("job-1_abc", 0, 0, "stderr", "err\n");
  Put("job-1_abc", 0, 1, "stdout", "rank1\n");
  auto all = ReadJobLog(work_, "job-1", 0, "", 0, 0, true);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, "a0\na1\na2\na10\n");
  EXPECT_EQ(all->next_offset, 13);
  EXPECT_TRUE(all->eof);
  // Chunks across file boundaries, and a running job never reaches eof.
  auto part = ReadJobLog(work_, "job-1", 0, "stdout", 2, 4, false);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->data, "\na1\n");
  EXPECT_EQ(part->next_offset, 6);
  EXPECT_FALSE(part->eof);
  auto rest = ReadJobLog(work_, "job-1", 0, "stdout", 6, 100, false);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->data, "a2\na10\n");
  EXPECT_FALSE(rest->eof);
  auto not_all = ReadJobLog(work_, "job-1", 0, "stdout", 6, 3, true);
  ASSERT_TRUE(not_all.ok());
  EXPECT_EQ(not_all->data, "a2\n");
  EXPECT_FALSE(not_all->eof);
  auto past = ReadJobLog(work_, "job-1", 0, "stdout", 50, 0, true);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data, "");
  EXPECT_EQ(past->next_offset, 50);
  EXPECT_TRUE(past->eof);
  EXPECT_EQ(ReadJobLog(work_, "job-1", 0, "stderr", 0, 0, true)->data, "err\n");
  EXPECT_EQ(ReadJobLog(work_, "job-1", 1, "stdout", 0, 0, true)->data, "rank1\n");
}

// A node that got the job again (its daemon replaced its lost part: same job id) has two launch
// directories; the earlier launch's output comes first whatever the random names, then the new
// one's (the modification times order them: a launch's directory changes only while it runs).
TEST_F(JobLogsTest, LaunchesOldestFirst) {
  Put("job-1_zzz", 0, 0, "stdout", "first launch\n");
  Put("job-1_zzz", 1, 0, "stdout", "first launch, restart\n");
  Put("job-1_aaa", 0, 0, "stdout", "second launch\n");
  const fs::path logs = fs::path(work_) / "job-1" / "logs";
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(logs / "job-1_zzz", now - std::chrono::seconds(60));
  fs::last_write_time(logs / "job-1_aaa", now - std::chrono::seconds(1));
  auto files = JobLogFiles(work_, "job-1", 0, "stdout");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files,
            (std::vector<std::string>{(logs / "job-1_zzz/attempt_0/0/stdout.log").string(),
                                      (logs / "job-1_zzz/attempt_1/0/stdout.log").string(),
                                      (logs / "job-1_aaa/attempt_0/0/stdout.log").string()}));
  auto all = ReadJobLog(work_, "job-1", 0, "stdout", 0, 0, true);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, "first launch\nfirst launch, restart\nsecond launch\n");
}

TEST_F(JobLogsTest, CapsChunksAtOneMiB) {
  Put("job-1_abc", 0, 0, "stdout", std::string(kMaxLogChunkBytes + 10, 'x'));
  auto r = ReadJobLog(work_, "job-1", 0, "stdout", 0, 5 * kMaxLogChunkBytes, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(static_cast<int64_t>(r->data.size()), kMaxLogChunkBytes);
  EXPECT_FALSE(r->eof);
  auto last = ReadJobLog(work_, "job-1", 0, "stdout", r->next_offset, 0, true);
  EXPECT_EQ(last->data, std::string(10, 'x'));
  EXPECT_TRUE(last->eof);
}

TEST_F(JobLogsTest, RefusesBadRequestsAndEscapes) {
  Put("job-1_abc", 0, 0, "stdout", "ok\n");
  EXPECT_EQ(ReadJobLog(work_, "../job-1", 0, "stdout", 0, 0, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJobLog(work_, "job-1", -1, "stdout", 0, 0, true).status().message(),
            "local rank must be >= 0, got -1");
  EXPECT_EQ(ReadJobLog(work_, "job-1", 0, "../x", 0, 0, true).status().message(),
            "stream must be stdout or stderr, got '../x'");
  EXPECT_EQ(ReadJobLog(work_, "job-1", 0, "stdout", -3, 0, true).status().message(),
            "offset must be >= 0, got -3");
  EXPECT_EQ(ReadJobLog(work_, "job-2", 0, "stdout", 0, 0, true).status().message(),
            "no job job-2 on this node");
  EXPECT_EQ(ReadJobLog(work_, "job-1", 5, "stdout", 0, 0, true).status().message(),
            "job job-1 has no log for local rank 5");
  auto early = ReadJobLog(work_, "job-1", 5, "stdout", 0, 0, false);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->data, "");
  EXPECT_FALSE(early->eof);
  // A job that replaces its log by a symlink to another file gets nothing from it.
  std::ofstream(fs::path(work_) / "secret") << "secret\n";
  const fs::path rank1 = fs::path(work_) / "job-1/logs/job-1_abc/attempt_0/1";
  fs::create_directories(rank1);
  fs::create_symlink(fs::path(work_) / "secret", rank1 / "stdout.log");
  EXPECT_EQ(ReadJobLog(work_, "job-1", 1, "stdout", 0, 0, true).status().code(),
            absl::StatusCode::kNotFound);  // O_NOFOLLOW: the link itself is not opened.
  // A directory symlinked out of the job directory.
  const fs::path outside = fs::path(work_) / "outside/attempt_0/2";
  fs::create_directories(outside);
  std::ofstream(outside / "stdout.log") << "outside\n";
  fs::create_directory_symlink(fs::path(work_) / "outside",
                               fs::path(work_) / "job-1/logs/job-1_zzz");
  auto escaped = ReadJobLog(work_, "job-1", 2, "stdout", 0, 0, true);
  EXPECT_EQ(escaped.status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace dgt::daemon
