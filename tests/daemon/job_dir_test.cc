// PrepareJobDir (daemon/job_runner.h): a job id never names two jobs' output on a node.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "daemon/job_runner.h"
#include "gtest/gtest.h"

namespace dgt::daemon {
namespace {

namespace fs = std::filesystem;

class JobDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt-job-dir-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    work_ = tmpl;
    dir_ = work_ + "/job-1";
  }
  void TearDown() override { fs::remove_all(work_); }

  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Put(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  // The entries of the work dir, sorted.
  std::string Entries() {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(work_)) names.insert(e.path().filename());
    std::string out;
    for (const auto& n : names) out += n + " ";
    return out;
  }

  std::string work_;
  std::string dir_;
};

TEST_F(JobDirTest, NewDirGetsTheUidFile) {
  auto moved = PrepareJobDir(dir_, "aa11");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, "");
  EXPECT_EQ(Read(dir_ + "/job-uid"), "aa11\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/job-uid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(Entries(), "job-1 ");
}

TEST_F(JobDirTest, SameUidKeepsTheEarlierOutput) {
  ASSERT_TRUE(PrepareJobDir(dir_, "aa11").ok());
  Put(dir_ + "/dgt-run.log", "first attempt\n");
  auto moved = PrepareJobDir(dir_, "aa11");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, "");
  EXPECT_EQ(Read(dir_ + "/dgt-run.log"), "first attempt\n");
  EXPECT_EQ(Entries(), "job-1 ");
}

TEST_F(JobDirTest, AnotherUidOrNoneMovesTheOldDirAside) {
  ASSERT_TRUE(PrepareJobDir(dir_, "aa11").ok());
  Put(dir_ + "/dgt-run.log", "job aa11\n");
  auto moved = PrepareJobDir(dir_, "bb22");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, work_ + "/job-1.aa11.1");
  EXPECT_EQ(Read(work_ + "/job-1.aa11.1/dgt-run.log"), "job aa11\n");
  EXPECT_EQ(Read(dir_ + "/job-uid"), "bb22\n");
  EXPECT_FALSE(fs::exists(dir_ + "/dgt-run.log"));
  // A dir without a uid file (a daemon before uids): "old"; taken names are skipped.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  Put(dir_ + "/dgt-run.log", "no uid\n");
  fs::create_directories(work_ + "/job-1.old.1");
  moved = PrepareJobDir(dir_, "cc33");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, work_ + "/job-1.old.2");
  EXPECT_EQ(Read(work_ + "/job-1.old.2/dgt-run.log"), "no uid\n");
  EXPECT_EQ(Read(dir_ + "/job-uid"), "cc33\n");
  // The same uid again: kept. Another uid that was moved aside before: the next free n.
  ASSERT_TRUE(PrepareJobDir(dir_, "cc33").ok());
  ASSERT_TRUE(PrepareJobDir(dir_, "aa11").ok());
  moved = PrepareJobDir(dir_, "dd44");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, work_ + "/job-1.aa11.2");
  EXPECT_EQ(Entries(), "job-1 job-1.aa11.1 job-1.aa11.2 job-1.cc33.1 job-1.old.1 job-1.old.2 ");
}

TEST_F(JobDirTest, NoUidUsesTheDirAsItIs) {
  fs::create_directories(dir_);
  Put(dir_ + "/dgt-run.log", "kept\n");
  auto moved = PrepareJobDir(dir_, "");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, "");
  EXPECT_EQ(Read(dir_ + "/dgt-run.log"), "kept\n");
  EXPECT_FALSE(fs::exists(dir_ + "/job-uid"));
}

TEST_F(JobDirTest, ErrorsNameThePath) {
  auto bad = PrepareJobDir(work_ + "/missing/job-1", "aa11");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "mkdir " + work_ + "/missing/job-1: No such file or directory");
}

TEST_F(JobDirTest, TheReasonLineSkipsInfoLines) {
  const std::string log = work_ + "/dgt-run.log";
  std::ofstream(log) << "[2026-12-01 21:54:01.000] [warning] dgt-run: a warning\n"
                        "dgt-run: error: stopped by SIGTERM\n"
                        "[2026-12-01 21:54:02.311] [info] dgt-run: worker logs of run 'job-11'\n"
                        "\n";
  EXPECT_EQ(LastReasonLine(log), "dgt-run: error: stopped by SIGTERM");
  std::ofstream(log) << "[2026-12-01 21:54:01.000] [error] dgt-run: lost the service\n"
                        "[2026-12-01 21:54:02.311] [debug] x\n";
  EXPECT_EQ(LastReasonLine(log), "[2026-12-01 21:54:01.000] [error] dgt-run: lost the service");
  std::ofstream(log) << "[2026-12-01 21:54:02.311] [info] dgt-run: started\n";
  EXPECT_EQ(LastReasonLine(log), "");
  EXPECT_EQ(LastReasonLine(work_ + "/none.log"), "");
}

}  // namespace
}  // namespace dgt::daemon
