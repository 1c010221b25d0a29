// The TCPStore wire server over real loopback sockets. The 1.x conversation is the recording of a
// real torch 1.13 client (shared/fixtures/torch-1.13-tcpstore/client-ops.json), replayed byte for
// byte and checked against the exact replies torch 1.13's own server gave.
#include "dgt/store/server.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/testutil/hex.h"
#include "tests/testutil/raw_client.h"

namespace dgt::store {
namespace {

using ::dgt::testing::Hex;
using ::dgt::testing::RawClient;
using ::dgt::testing::Unhex;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.max_value_bytes = 1024;
    server_ = std::make_unique<Server>(options);
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
  }
  std::unique_ptr<Server> server_;
};

struct Exchange {
  const char* request_hex;
  const char* reply_hex;  // "" for requests without a reply.
};

TEST_F(ServerTest, ReplaysRecordedTorch113Conversation) {
  const Exchange conversation[] = {
      {"030500000000000000696e69742f0100000000000000", "0100000000000000"},  // ADD init/ 1
      {"0004000000000000002f6b6579050000000000000076616c7565", ""},          // SET /key
      {"05010000000000000004000000000000002f6b6579", "00"},                  // WAIT /key
      {"0204000000000000002f6b6579", "050000000000000076616c7565"},          // GET /key
      {"0304000000000000002f6374720700000000000000", "0700000000000000"},    // ADD /ctr 7
      {"01", ""},  // COMPARE_SET, sent in two chunks as recorded.
      {"04000000000000002f6b6579050000000000000076616c756502000000000000007632",
       "02000000000000007632"},
      {"0108000000000000002f6d697373696e67000000000000000003000000000000006e6577",
       "03000000000000006e6577"},
      {"05", ""},
      {"010000000000000004000000000000002f6b6579", "00"},  // WAIT /key
      {"06", "0400000000000000"},                          // GETNUMKEYS (init/ counts)
      {"08", ""},
      {"04000000000000002f6b6579", "0100000000000000"},  // DELETE_KEY /key
  };
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  for (const Exchange& x : conversation) {
    ASSERT_TRUE(c.Send(Unhex(x.request_hex)));
    std::string expected = Unhex(x.reply_hex);
    if (expected.empty()) continue;
    auto reply = c.Recv(expected.size());
    ASSERT_TRUE(reply.has_value()) << "no reply to " << x.request_hex;
    EXPECT_EQ(Hex(*reply), x.reply_hex) << "request " << x.request_hex;
  }
}

TEST_F(ServerTest, V1GetOfMissingKeyClosesOnlyThatConnection) {
  RawClient a(server_->port());
  RawClient b(server_->port());
  ASSERT_TRUE(
      b.Send(Unhex("0001000000000000006b0100000000000000"
                   "76")));  // SET k v
  ASSERT_TRUE(
      a.Send(Unhex("020100000000000000"
                   "7a")));  // GET z (missing)
  EXPECT_TRUE(a.ClosedByPeer());
  ASSERT_TRUE(
      b.Send(Unhex("020100000000000000"
                   "6b")));  // GET k
  EXPECT_EQ(Hex(*b.Recv(9)), "010000000000000076");
}

TEST_F(ServerTest, V2HandshakePingAndEmptyGet) {
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Unhex("00cef7853c")));  // VALIDATE
  ASSERT_TRUE(
      c.Send(Unhex("0d"
                   "efbeadde")));  // PING 0xdeadbeef
  EXPECT_EQ(Hex(*c.Recv(4)), "efbeadde");
  ASSERT_TRUE(c.Send(Unhex("040500000000000000696e69742f0100000000000000")));  // ADD init/ 1
  EXPECT_EQ(Hex(*c.Recv(8)), "0100000000000000");
  ASSERT_TRUE(
      c.Send(Unhex("030100000000000000"
                   "7a")));  // GET z (missing) → empty value
  EXPECT_EQ(Hex(*c.Recv(8)), "0000000000000000");
}

// Requests of every size relative to the server's reads: many small ones in one write (past the
// connection's 64-byte first read), a value larger than the 64 KiB shared read buffer, and a
// request sent one byte at a time. Each reply arrives whole and in order.
TEST_F(ServerTest, RequestsAcrossReadBoundariesAnswerInOrder) {
  ServerOptions options;
  options.max_value_bytes = 1 << 20;
  Server big(options);
  ASSERT_TRUE(big.Start().ok());
  RawClient c(big.port());
  auto bytes = [](absl::string_view s) {
    uint64_t n = s.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + std::string(s);
  };
  // 100 ADDs on "n" in one write: 100 replies, 1..100.
  std::string adds;
  for (int i = 0; i < 100; ++i) adds += "\x03" + bytes("n") + std::string("\x01\0\0\0\0\0\0\0", 8);
  ASSERT_TRUE(c.Send(adds));
  auto replies = c.Recv(800);
  ASSERT_TRUE(replies.has_value());
  for (int64_t i = 0; i < 100; ++i) {
    int64_t v = 0;
    std::memcpy(&v, replies->data() + 8 * i, 8);
    ASSERT_EQ(v, i + 1);
  }
  // SET of a 300,000-byte value, then GET of it, in one write.
  const std::string value(300000, 'x');
  ASSERT_TRUE(c.Send(std::string(1, '\0') + bytes("big") + bytes(value) + "\x02" + bytes("big")));
  auto got = c.Recv(8 + value.size());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, bytes(value));
  // GET "big" one byte at a time.
  const std::string get = "\x02" + bytes("big");
  for (char ch : get) {
    ASSERT_TRUE(c.Send(std::string(1, ch)));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  got = c.Recv(8 + value.size());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, bytes(value));
}

TEST_F(ServerTest, V2WaitCancelKeepsConnectionUsable) {
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Unhex("00cef7853c")));
  ASSERT_TRUE(
      c.Send(Unhex("06"
                   "0100000000000000"
                   "0100000000000000"
                   "77")));          // WAIT [w]
  ASSERT_TRUE(c.Send(Unhex("0c")));  // CANCEL_WAIT
  EXPECT_EQ(Hex(*c.Recv(1)), "01");  // WAIT_CANCELED
  // Setting the key later must not send a stale STOP_WAITING.
  ASSERT_TRUE(
      c.Send(Unhex("01"
                   "0100000000000000"
                   "77"
                   "0100000000000000"
                   "31")));
  ASSERT_TRUE(c.Send(Unhex("07")));  // GETNUMKEYS
  EXPECT_EQ(Hex(*c.Recv(8)), "0100000000000000");
}

TEST_F(ServerTest, WaitWakesWhenAnotherClientSets) {
  RawClient waiter(server_->port());
  RawClient setter(server_->port());
  ASSERT_TRUE(
      waiter.Send(Unhex("05"
                        "0200000000000000"
                        "0100000000000000"
                        "61"
                        "0100000000000000"
                        "62")));  // WAIT [a, b]
  ASSERT_TRUE(
      setter.Send(Unhex("00"
                        "0100000000000000"
                        "61"
                        "0100000000000000"
                        "31")));
  ASSERT_TRUE(setter.Send(Unhex("06")));  // GETNUMKEYS: a round trip, so SET a was applied.
  EXPECT_EQ(Hex(*setter.Recv(8)), "0100000000000000");
  ASSERT_TRUE(
      setter.Send(Unhex("03"
                        "0100000000000000"
                        "62"
                        "0500000000000000")));  // ADD b 5
  EXPECT_EQ(Hex(*setter.Recv(8)), "0500000000000000");
  EXPECT_EQ(Hex(*waiter.Recv(1)), "00");
}

// One SET wakes every waiter in its own pass; waiters that hung up before it leave nothing behind
// and are skipped.
TEST_F(ServerTest, OneSetWakesManyWaitersAndSkipsDepartedOnes) {
  const std::string wait = Unhex(
      "05"
      "0100000000000000"
      "0100000000000000"
      "66");  // WAIT [f]
  std::vector<std::unique_ptr<RawClient>> waiters;
  for (int i = 0; i < 64; ++i) {
    waiters.push_back(std::make_unique<RawClient>(server_->port()));
    ASSERT_TRUE(waiters.back()->Send(wait));
  }
  // Every WAIT is registered before any hang-up (else the count can pass 32 on its way up).
  for (int attempt = 0; attempt < 500 && server_->Stats().pending_waits != 64; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(server_->Stats().pending_waits, 64u);
  for (int i = 0; i < 64; i += 2) waiters[i].reset();  // Half of them hang up while waiting.
  for (int attempt = 0; attempt < 500 && server_->Stats().pending_waits != 32; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->Stats().pending_waits, 32u);
  RawClient setter(server_->port());
  ASSERT_TRUE(
      setter.Send(Unhex("00"
                        "0100000000000000"
                        "66"
                        "0100000000000000"
                        "31")));  // SET f 1
  for (int i = 1; i < 64; i += 2) EXPECT_EQ(Hex(*waiters[i]->Recv(1)), "00") << "waiter " << i;
  EXPECT_EQ(server_->Stats().pending_waits, 0u);
}

// torch 1.x frames, for the WAIT tests below.
std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }
std::string Field(const std::string& s) { return U64(s.size()) + s; }
std::string V1Set(const std::string& k, const std::string& v) {
  return std::string(1, '\x00') + Field(k) + Field(v);
}
std::string V1Get(const std::string& k) { return std::string(1, '\x02') + Field(k); }
std::string V1Add(const std::string& k, int64_t d) {
  return std::string(1, '\x03') + Field(k) + U64(static_cast<uint64_t>(d));
}
std::string V1Wait(const std::string& k) { return std::string(1, '\x05') + U64(1) + Field(k); }
const char kV1NumKeys[] = "\x06";

// The expected bytes below are what torch 1.13's own server sends for the same requests (run with
// Debian's python3-torch: a get() whose wait timed out, then further calls on that client; see
// tests/e2e/test_store_torch.py, which compares the two servers through a real 1.13 client).

// A 1.x client's get() that timed out leaves its WAIT pending (1.x has no CANCEL_WAIT); its next
// call on the same connection must be served, not make the server drop the connection.
TEST_F(ServerTest, V1NextCallAfterAbandonedWaitIsServed) {
  RawClient c(server_->port());
  RawClient setter(server_->port());
  ASSERT_TRUE(setter.Send(V1Set("p", "v")));
  ASSERT_TRUE(setter.Send(kV1NumKeys));  // A round trip: SET p was applied.
  EXPECT_EQ(Hex(*setter.Recv(8)), "0100000000000000");
  ASSERT_TRUE(c.Send(V1Wait("m")));  // get("m"): the client gives up waiting.
  ASSERT_TRUE(c.Send(V1Wait("p")));  // get("p"): WAIT, then GET.
  EXPECT_EQ(Hex(*c.Recv(1)), "00");
  ASSERT_TRUE(c.Send(V1Get("p")));
  EXPECT_EQ(Hex(*c.Recv(9)), "010000000000000076");
  // As torch 1.13: the abandoned wait answers when its key appears.
  ASSERT_TRUE(setter.Send(V1Set("m", "w")));
  EXPECT_EQ(Hex(*c.Recv(1)), "00");
  ASSERT_TRUE(c.Send(kV1NumKeys));
  EXPECT_EQ(Hex(*c.Recv(8)), "0200000000000000");
}

// Polling get() of a missing key with a timeout: each poll adds a WAIT, and when the key appears
// torch 1.13 answers once (its per-connection counter hits zero once), not once per WAIT.
TEST_F(ServerTest, V1RepeatedWaitsOnAMissingKeyAnswerOnce) {
  RawClient c(server_->port());
  RawClient setter(server_->port());
  ASSERT_TRUE(c.Send(V1Wait("k")));
  ASSERT_TRUE(c.Send(V1Wait("k")));
  ASSERT_TRUE(c.Send(V1Wait("k")));
  ASSERT_TRUE(c.Send(kV1NumKeys));  // A round trip: the WAITs are registered.
  EXPECT_EQ(Hex(*c.Recv(8)), "0000000000000000");
  ASSERT_TRUE(setter.Send(V1Set("k", "v")));
  ASSERT_TRUE(setter.Send(kV1NumKeys));  // A round trip: SET k was applied.
  EXPECT_EQ(Hex(*setter.Recv(8)), "0100000000000000");
  EXPECT_EQ(Hex(*c.Recv(1)), "00");  // The one STOP_WAITING for the three WAITs.
  ASSERT_TRUE(c.Send(V1Get("k")));
  EXPECT_EQ(Hex(*c.Recv(9)), "010000000000000076");  // Nothing stale in between.
  EXPECT_EQ(server_->Stats().pending_waits, 0u);
}

// torch's counter belongs to the connection and the latest WAIT that did not complete at once
// sets it: a key of an earlier, abandoned WAIT that appears counts it down too.
TEST_F(ServerTest, V1WaitCounterIsPerConnectionAsTorch113) {
  RawClient c(server_->port());
  RawClient setter(server_->port());
  ASSERT_TRUE(c.Send(V1Wait("a")));
  ASSERT_TRUE(c.Send(V1Wait("b")));
  ASSERT_TRUE(c.Send(kV1NumKeys));  // A round trip: the WAITs are registered.
  EXPECT_EQ(Hex(*c.Recv(8)), "0000000000000000");
  ASSERT_TRUE(setter.Send(V1Set("a", "1")));
  EXPECT_EQ(Hex(*c.Recv(1)), "00");
  ASSERT_TRUE(setter.Send(V1Set("b", "2")));  // The counter is below zero now: no reply.
  ASSERT_TRUE(setter.Send(kV1NumKeys));
  EXPECT_EQ(Hex(*setter.Recv(8)), "0200000000000000");
  ASSERT_TRUE(c.Send(kV1NumKeys));
  EXPECT_EQ(Hex(*c.Recv(8)), "0200000000000000");
  EXPECT_EQ(server_->Stats().pending_waits, 0u);
}

// A request that completes this connection's own pending wait (ADD of the awaited key) gets its
// reply first and the STOP_WAITING after it, as torch's addHandler sends them; the other order
// would make the client read the ADD's result one byte off.
TEST_F(ServerTest, V1OwnAddAnswersBeforeTheStopWaitingItCauses) {
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(V1Wait("n")));
  ASSERT_TRUE(c.Send(V1Add("n", 5)));
  EXPECT_EQ(Hex(*c.Recv(9)), "050000000000000000");
  ASSERT_TRUE(c.Send(kV1NumKeys));
  EXPECT_EQ(Hex(*c.Recv(8)), "0100000000000000");
}

TEST_F(ServerTest, HostileInputClosesThatConnectionAndKeepsData) {
  RawClient good(server_->port());
  ASSERT_TRUE(
      good.Send(Unhex("00"
                      "0100000000000000"
                      "6b"
                      "0100000000000000"
                      "76")));
  RawClient garbage(server_->port());
  ASSERT_TRUE(garbage.Send(Unhex("ee")));  // Unknown 1.x opcode.
  EXPECT_TRUE(garbage.ClosedByPeer());
  RawClient oversized(server_->port());
  // SET with a claimed 1 TiB value: closed from the header, nothing allocated.
  ASSERT_TRUE(
      oversized.Send(Unhex("00"
                           "0100000000000000"
                           "78"
                           "0000000000010000")));
  EXPECT_TRUE(oversized.ClosedByPeer());
  ASSERT_TRUE(
      good.Send(Unhex("020100000000000000"
                      "6b")));  // GET k
  EXPECT_EQ(Hex(*good.Recv(9)), "010000000000000076");
}

TEST(ServerStartTest, BadHostAndPortInUse) {
  ServerOptions bad;
  bad.host = "not-an-ip";
  Server s(bad);
  absl::Status st = s.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "store listen address must be an IP literal, got 'not-an-ip'");

  Server first(ServerOptions{});
  ASSERT_TRUE(first.Start().ok());
  ServerOptions same;
  same.port = first.port();
  Server second(same);
  EXPECT_EQ(second.Start().code(), absl::StatusCode::kAlreadyExists);
}

TEST(ServerStartTest, Ipv6Loopback) {
  ServerOptions v6;
  v6.host = "::1";
  Server s(v6);
  ASSERT_TRUE(s.Start().ok());
  EXPECT_NE(s.port(), 0);
}

}  // namespace
}  // namespace dgt::store
