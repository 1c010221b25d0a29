#include "agent/error_file.h"

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

}  // namespace
}  // namespace dgt::agent
