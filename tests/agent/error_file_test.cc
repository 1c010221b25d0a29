#include "agent/workers/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

// Written by torch 1.13's @record (torch/distributed/elastic/multiprocessing/errors) under
// Debian's /usr/bin/python3 for `raise ValueError("boom from rank")`.
constexpr char kTorch113[] =
    R"({"message": {"message": "ValueError: boom from rank", "extraInfo": {"py_callstack": )"
    R"("Traceback (most recent call last):\n  File \"/tmp/rec/w.py\", line 4, in main\n    )"
    R"(raise ValueError(\"boom from rank\")\nValueError: boom from rank\n", )"
    R"("timestamp": "1795970674"}}})";

TEST(ErrorFileTest, ParsesTorchRecordFormat) {
  auto e = ParseTorchErrorFile(kTorch113);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "ValueError: boom from rank");
  EXPECT_EQ(e->traceback,
            "Traceback (most recent call last):\n  File \"/tmp/rec/w.py\", line 4, in main\n"
            "    raise ValueError(\"boom from rank\")\nValueError: boom from rank\n");
  EXPECT_EQ(e->timestamp, 1795970674);
}

TEST(ErrorFileTest, PlainStringMessage) {
  auto e = ParseTorchErrorFile(R"({"message": "segfault in c10d", "errorTraits": {}})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "segfault in c10d");
  EXPECT_EQ(e->traceback, "");
  EXPECT_EQ(e->timestamp, 0);
}

TEST(ErrorFileTest, RejectsOtherJson) {
  EXPECT_FALSE(ParseTorchErrorFile("not json").has_value());
  EXPECT_FALSE(ParseTorchErrorFile("[1, 2]").has_value());
  EXPECT_FALSE(ParseTorchErrorFile(R"({"error": 1})").has_value());
  EXPECT_FALSE(ReadTorchErrorFile("/nonexistent/error.json").has_value());
}

std::string Fresh(const std::string& name) {
  std::string path = ::testing::TempDir() + name;
  ::unlink(path.c_str());
  return path;
}

TEST(ErrorFileTest, ReadsARegularFile) {
  const std::string path = Fresh("error_file_regular.json");
  std::ofstream(path) << kTorch113;
  auto e = ReadTorchErrorFile(path);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "ValueError: boom from rank");
}

// A worker may put a FIFO where its error file goes: reading it must not block the agent (which
// then never reported the worker's exit).
TEST(ErrorFileTest, FifoDoesNotBlock) {
  const std::string path = Fresh("error_file_fifo.json");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&] { return ReadTorchErrorFile(path); });
  if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the reader (open, then EOF) so that the test ends, and fail.
    int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    read.wait();
    FAIL() << "ReadTorchErrorFile blocked on a FIFO for 5 s";
  }
  EXPECT_FALSE(read.get().has_value());
}

TEST(ErrorFileTest, RefusesDirectoriesDevicesAndOversizedFiles) {
  EXPECT_FALSE(ReadTorchErrorFile(::testing::TempDir()).has_value());
  EXPECT_FALSE(ReadTorchErrorFile("/dev/zero").has_value());
  const std::string path = Fresh("error_file_big.json");
  {
    // Valid JSON, one byte over the cap.
    std::ofstream out(path);
    out << R"({"message": ")" << std::string(kMaxErrorFileBytes - 14, 'x') << R"("})";
  }
  struct stat st = {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(st.st_size, kMaxErrorFileBytes + 1);
  EXPECT_FALSE(ReadTorchErrorFile(path).has_value());
  ASSERT_EQ(::truncate(path.c_str(), kMaxErrorFileBytes), 0);  // Now cut: not JSON.
  EXPECT_FALSE(ReadTorchErrorFile(path).has_value());
}

}  // namespace
}  // namespace dgt::agent
