// Replays real torch 2.13 client traffic against dgt's server, byte for byte, and checks every
// reply against the bytes torch 2.13's own (libuv) server answered. The recordings are in
// tests/store/fixtures/torch-2.13-tcpstore (see its README.md for how they were made): one
// TCPStore client doing every public method once, with the client's use_libuv=True and False.
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/hex.h"
#include "tests/testutil/raw_client.h"

namespace dgt::store {
namespace {

using ::dgt::testing::Hex;
using ::dgt::testing::RawClient;
using ::dgt::testing::Unhex;

struct Chunk {
  bool to_server = false;
  std::string bytes;
};

std::vector<Chunk> LoadRecording(const std::string& name) {
  std::string path =
      absl::StrCat(DGT_SOURCE_DIR, "/tests/store/fixtures/torch-2.13-tcpstore/", name);
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Chunk> chunks;
  for (const nlohmann::json& c : nlohmann::json::parse(text.str())) {
    EXPECT_EQ(c["conn"].get<int>(), 1) << "a replay covers one connection";
    if (c["hex"] == "EOF") break;
    chunks.push_back({c["dir"] == "c2s", Unhex(c["hex"].get<std::string>())});
  }
  return chunks;
}

// LIST_KEYS' reply (i64 n, n u64-length keys) as a set: torch lists its hash map's order, dgt
// sorts, and the Python client does not promise an order.
std::set<std::string> ListedKeys(const std::string& reply) {
  std::set<std::string> keys;
  int64_t n = 0;
  std::memcpy(&n, reply.data(), 8);
  size_t pos = 8;
  for (int64_t i = 0; i < n && pos + 8 <= reply.size(); ++i) {
    uint64_t len = 0;
    std::memcpy(&len, reply.data() + pos, 8);
    keys.insert(reply.substr(pos + 8, len));
    pos += 8 + len;
  }
  return keys;
}

class V2RecordedTest : public ::testing::TestWithParam<const char*> {};

TEST_P(V2RecordedTest, DgtAnswersAsTorch213Did) {
  Server server{ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  std::vector<Chunk> chunks = LoadRecording(GetParam());
  ASSERT_GT(chunks.size(), 40u);
  RawClient c(server.port());
  ASSERT_TRUE(c.connected());
  std::string last_request;
  int replies = 0;
  for (const Chunk& chunk : chunks) {
    if (chunk.to_server) {
      ASSERT_TRUE(c.Send(chunk.bytes));
      last_request = chunk.bytes;
      continue;
    }
    auto reply = c.Recv(chunk.bytes.size());
    ASSERT_TRUE(reply.has_value()) << "no reply to " << Hex(last_request);
    ++replies;
    if (last_request == "\x11") {
      EXPECT_EQ(ListedKeys(*reply), ListedKeys(chunk.bytes));
    } else {
      EXPECT_EQ(Hex(*reply), Hex(chunk.bytes)) << "request " << Hex(last_request);
    }
  }
  EXPECT_GT(replies, 20);
  // Nothing more is owed: a stray byte (e.g. a STOP_WAITING after a CANCEL_WAIT) would shift
  // GETNUMKEYS' reply. 7 keys: init/, /ctr, /missing, /m1, /m2, and the barrier counters /b, /b2.
  ASSERT_TRUE(c.Send(Unhex("07")));
  auto n = c.Recv(8);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(Hex(*n), "0700000000000000");
}

INSTANTIATE_TEST_SUITE_P(Torch213, V2RecordedTest,
                         ::testing::Values("client-ops-libuv.json", "client-ops-legacy.json"));

}  // namespace
}  // namespace dgt::store
