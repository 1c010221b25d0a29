#include "common/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

namespace dgt {
namespace {

namespace fs = std::filesystem;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dgt_read_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

TEST_F(ReadFileTest, AFileAtTheLimitIsReadWhole) {
  const CappedRead r = ReadFileUpTo(Write("f", "12345"), 5);
  EXPECT_EQ(r.outcome, CappedRead::Outcome::kOk);
  EXPECT_EQ(r.text, "12345");
}

TEST_F(ReadFileTest, OneBytePastTheLimitIsTooLarge) {
  const CappedRead r = ReadFileUpTo(Write("f", "123456"), 5);
  EXPECT_EQ(r.outcome, CappedRead::Outcome::kTooLarge);
  EXPECT_EQ(r.text, "");
}

TEST_F(ReadFileTest, AFileLargerThanOneChunkIsReadWhole) {
  const std::string big(200 * 1024 + 7, 'x');
  const CappedRead r = ReadFileUpTo(Write("f", big), 1 << 20);
  EXPECT_EQ(r.outcome, CappedRead::Outcome::kOk);
  EXPECT_EQ(r.text, big);
}

TEST_F(ReadFileTest, AnEndlessFileStopsOnePastTheLimit) {
  const CappedRead r = ReadFileUpTo("/dev/zero", 1 << 20);
  EXPECT_EQ(r.outcome, CappedRead::Outcome::kTooLarge);
}

TEST_F(ReadFileTest, ADirectoryIsNamedAsOne) {
  EXPECT_EQ(ReadFileUpTo(dir_.string(), 10).outcome, CappedRead::Outcome::kDirectory);
}

TEST_F(ReadFileTest, AMissingFileCarriesItsErrno) {
  const CappedRead r = ReadFileUpTo((dir_ / "missing").string(), 10);
  EXPECT_EQ(r.outcome, CappedRead::Outcome::kUnreadable);
  EXPECT_EQ(r.error, ENOENT);
}

}  // namespace
}  // namespace dgt
