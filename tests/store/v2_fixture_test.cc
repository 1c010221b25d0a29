// Byte-level fixtures for every opcode of the torch 2.x TCPStore protocol, against dgt's wire
// server over loopback. Every request layout and single-client reply here agrees with the real
// torch 2.13 traffic recorded in tests/store/fixtures/torch-2.13-tcpstore (replayed whole by
// v2_recorded_test.cc); where the original hand-derived fixture disagreed (QUEUE_POP's length
// field) it was replaced by the recorded bytes. Multi-client behaviour (a WAIT woken by another
// client, BARRIER across clients, one waiter woken per QUEUE_PUSH) is checked against torch
// 2.13's own server in tests/e2e/test_store_torch2.py. Original source: REFERENCE.md §4 (framing:
// one opcode byte, strings as u64 length + bytes, integers little-endian host order; 2.x opcode
// numbers VALIDATE 0 ... QUEUE_LEN 16; reply shapes and semantics as listed there), LIST_KEYS 17
// and BARRIER 18 as recorded from torch 2.13.
// Hex is written field by field: "03" opcode, "0100000000000000" a u64/i64 1, "61" the byte 'a'.
#include <memory>
#include <string>

#include "dgt/store/server.h"
#include "gtest/gtest.h"
#include "tests/testutil/hex.h"
#include "tests/testutil/raw_client.h"

namespace dgt::store {
namespace {

using ::dgt::testing::Hex;
using ::dgt::testing::RawClient;
using ::dgt::testing::Unhex;

constexpr char kValidate[] =
    "00"
    "cef7853c";  // §4: VALIDATE 0, u32 magic 0x3C85F7CE.

class V2FixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{});
    ASSERT_TRUE(server_->Start().ok());
  }
  // A connection that has sent VALIDATE, as every 2.x client does first.
  std::unique_ptr<RawClient> Open() {
    auto c = std::make_unique<RawClient>(server_->port());
    EXPECT_TRUE(c->connected());
    EXPECT_TRUE(c->Send(Unhex(kValidate)));
    return c;
  }
  // Sends `request_hex`, reads exactly the expected reply's length, returns its hex.
  static std::string Exchange(RawClient& c, const std::string& request_hex, size_t reply_len) {
    EXPECT_TRUE(c.Send(Unhex(request_hex)));
    auto r = c.Recv(reply_len);
    return r ? Hex(*r) : "<no reply>";
  }
  std::unique_ptr<Server> server_;
};

TEST_F(V2FixtureTest, ValidateHasNoReplyAndPingEchoesTheNonce) {
  auto c = Open();
  // §4: PING 13 (0x0d), u32 nonce echoed.
  EXPECT_EQ(Exchange(*c,
                     "0d"
                     "04030201",
                     4),
            "04030201");
  // §4: a connection starts VALIDATE, PING, then ADD `init/` 1 (opcode 4 in 2.x).
  EXPECT_EQ(Exchange(*c,
                     "04"
                     "0500000000000000"
                     "696e69742f"
                     "0100000000000000",
                     8),
            "0100000000000000");
}

TEST_F(V2FixtureTest, BadValidateMagicClosesTheConnection) {
  RawClient c(server_->port());
  // Starts like VALIDATE but the magic differs, so it is not 2.x: it reads as a 1.x SET whose
  // key length (ce f7 85 3d 00 ..., about 1 GiB) is over the key limit.
  ASSERT_TRUE(
      c.Send(Unhex("00"
                   "cef7853d"
                   "00000000")));
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(V2FixtureTest, SetGetCompareSetAdd) {
  auto c = Open();
  // SET 1: key "a", value "xy"; no reply.
  ASSERT_TRUE(
      c->Send(Unhex("01"
                    "0100000000000000"
                    "61"
                    "0200000000000000"
                    "7879")));
  // GET 3: key "a" → value "xy".
  EXPECT_EQ(Exchange(*c,
                     "03"
                     "0100000000000000"
                     "61",
                     10),
            "0200000000000000"
            "7879");
  // GET of a missing key → empty value (libuv server), the connection stays open.
  EXPECT_EQ(Exchange(*c,
                     "03"
                     "0100000000000000"
                     "7a",
                     8),
            "0000000000000000");
  // COMPARE_SET 2, present and equal: "a" xy → "z"; reply the new value.
  EXPECT_EQ(Exchange(*c,
                     "02"
                     "0100000000000000"
                     "61"
                     "0200000000000000"
                     "7879"
                     "0100000000000000"
                     "7a",
                     9),
            "0100000000000000"
            "7a");
  // COMPARE_SET present, not equal: reply the current value, unchanged.
  EXPECT_EQ(Exchange(*c,
                     "02"
                     "0100000000000000"
                     "61"
                     "0100000000000000"
                     "71"
                     "0100000000000000"
                     "77",
                     9),
            "0100000000000000"
            "7a");
  // COMPARE_SET missing key, empty expected: stores and returns desired "n".
  EXPECT_EQ(Exchange(*c,
                     "02"
                     "0100000000000000"
                     "6d"
                     "0000000000000000"
                     "0100000000000000"
                     "6e",
                     9),
            "0100000000000000"
            "6e");
  // COMPARE_SET missing key, non-empty expected "e": returns expected, stores nothing.
  EXPECT_EQ(Exchange(*c,
                     "02"
                     "0100000000000000"
                     "6f"
                     "0100000000000000"
                     "65"
                     "0100000000000000"
                     "6e",
                     9),
            "0100000000000000"
            "65");
  // ADD 4: missing counts as 0; i64 -2 is fe ff .. ff.
  EXPECT_EQ(Exchange(*c,
                     "04"
                     "0100000000000000"
                     "63"
                     "feffffffffffffff",
                     8),
            "feffffffffffffff");
  EXPECT_EQ(Exchange(*c,
                     "04"
                     "0100000000000000"
                     "63"
                     "0500000000000000",
                     8),
            "0300000000000000");
  // The counter is stored as ASCII decimal "3".
  EXPECT_EQ(Exchange(*c,
                     "03"
                     "0100000000000000"
                     "63",
                     9),
            "0100000000000000"
            "33");
}

TEST_F(V2FixtureTest, CheckWaitNumKeysDelete) {
  auto c = Open();
  // CHECK 5: [a] missing → NOT_READY 1.
  EXPECT_EQ(Exchange(*c,
                     "05"
                     "0100000000000000"
                     "0100000000000000"
                     "61",
                     1),
            "01");
  ASSERT_TRUE(
      c->Send(Unhex("01"
                    "0100000000000000"
                    "61"
                    "0000000000000000")));  // SET a ""
  // CHECK [a] → READY 0.
  EXPECT_EQ(Exchange(*c,
                     "05"
                     "0100000000000000"
                     "0100000000000000"
                     "61",
                     1),
            "00");
  // WAIT 6: [a] present → STOP_WAITING 0 at once.
  EXPECT_EQ(Exchange(*c,
                     "06"
                     "0100000000000000"
                     "0100000000000000"
                     "61",
                     1),
            "00");
  // GETNUMKEYS 7 → i64 1.
  EXPECT_EQ(Exchange(*c, "07", 8), "0100000000000000");
  // DELETE_KEY 8: present → 1, then missing → 0.
  EXPECT_EQ(Exchange(*c,
                     "08"
                     "0100000000000000"
                     "61",
                     8),
            "0100000000000000");
  EXPECT_EQ(Exchange(*c,
                     "08"
                     "0100000000000000"
                     "61",
                     8),
            "0000000000000000");
  EXPECT_EQ(Exchange(*c, "07", 8), "0000000000000000");
}

TEST_F(V2FixtureTest, WaitIsAnsweredWhenAnotherClientSets) {
  auto waiter = Open();
  auto setter = Open();
  ASSERT_TRUE(
      waiter->Send(Unhex("06"
                         "0100000000000000"
                         "0100000000000000"
                         "77")));  // WAIT [w]
  EXPECT_EQ(Exchange(*setter,
                     "0d"
                     "01000000",
                     4),
            "01000000");  // PING: the WAIT is in.
  ASSERT_TRUE(
      setter->Send(Unhex("01"
                         "0100000000000000"
                         "77"
                         "0100000000000000"
                         "31")));
  EXPECT_EQ(Hex(*waiter->Recv(1)), "00");  // STOP_WAITING
}

TEST_F(V2FixtureTest, AppendMultiGetMultiSet) {
  auto c = Open();
  // APPEND 9: creates "l" = "ab", then appends "c"; no reply.
  ASSERT_TRUE(
      c->Send(Unhex("09"
                    "0100000000000000"
                    "6c"
                    "0200000000000000"
                    "6162")));
  ASSERT_TRUE(
      c->Send(Unhex("09"
                    "0100000000000000"
                    "6c"
                    "0100000000000000"
                    "63")));
  // MULTI_SET 11: 2 pairs (x="1", y="").
  ASSERT_TRUE(
      c->Send(Unhex("0b"
                    "0200000000000000"
                    "0100000000000000"
                    "78"
                    "0100000000000000"
                    "31"
                    "0100000000000000"
                    "79"
                    "0000000000000000")));
  // MULTI_GET 10: [l, y, x] → values back to back.
  EXPECT_EQ(Exchange(*c,
                     "0a"
                     "0300000000000000"
                     "0100000000000000"
                     "6c"
                     "0100000000000000"
                     "79"
                     "0100000000000000"
                     "78",
                     11 + 8 + 9),
            "0300000000000000"
            "616263"
            "0000000000000000"
            "0100000000000000"
            "31");
}

TEST_F(V2FixtureTest, CancelWaitAnswersWaitCanceledAndLeavesNothing) {
  auto c = Open();
  ASSERT_TRUE(
      c->Send(Unhex("06"
                    "0100000000000000"
                    "0100000000000000"
                    "77")));  // WAIT [w]
  // CANCEL_WAIT 12 → WAIT_CANCELED 1.
  EXPECT_EQ(Exchange(*c, "0c", 1), "01");
  EXPECT_EQ(server_->Stats().pending_waits, 0u);
  // A later SET of w sends no stale STOP_WAITING: the next reply is PING's.
  ASSERT_TRUE(
      c->Send(Unhex("01"
                    "0100000000000000"
                    "77"
                    "0100000000000000"
                    "31")));
  EXPECT_EQ(Exchange(*c,
                     "0d"
                     "aabbccdd",
                     4),
            "aabbccdd");
}

TEST_F(V2FixtureTest, CancelWaitRacingStopWaitingSendsBothInOrder) {
  auto waiter = Open();
  auto setter = Open();
  ASSERT_TRUE(
      waiter->Send(Unhex("06"
                         "0100000000000000"
                         "0100000000000000"
                         "77")));  // WAIT [w]
  EXPECT_EQ(Exchange(*setter,
                     "0d"
                     "01000000",
                     4),
            "01000000");
  ASSERT_TRUE(
      setter->Send(Unhex("01"
                         "0100000000000000"
                         "77"
                         "0100000000000000"
                         "31")));
  EXPECT_EQ(Exchange(*setter,
                     "0d"
                     "02000000",
                     4),
            "02000000");  // SET w applied.
  // The client timed out just as the key arrived: STOP_WAITING is already on its way, then the
  // cancel is answered with WAIT_CANCELED; the connection stays usable.
  EXPECT_EQ(Exchange(*waiter, "0c", 2),
            "00"
            "01");
  EXPECT_EQ(Exchange(*waiter, "07", 8), "0100000000000000");
}

TEST_F(V2FixtureTest, CancelWaitWithoutAWait) {
  auto c = Open();
  EXPECT_EQ(Exchange(*c, "0c", 1), "01");
}

TEST_F(V2FixtureTest, Queues) {
  auto c = Open();
  // QUEUE_LEN 16 of a missing queue → 0.
  EXPECT_EQ(Exchange(*c,
                     "10"
                     "0100000000000000"
                     "71",
                     8),
            "0000000000000000");
  // QUEUE_POP 15 of an empty queue → i64 0 and no item.
  EXPECT_EQ(Exchange(*c,
                     "0f"
                     "0100000000000000"
                     "71",
                     8),
            "0000000000000000");
  // QUEUE_PUSH 14: "q" ← "i1", "i2"; no reply.
  ASSERT_TRUE(
      c->Send(Unhex("0e"
                    "0100000000000000"
                    "71"
                    "0200000000000000"
                    "6931")));
  ASSERT_TRUE(
      c->Send(Unhex("0e"
                    "0100000000000000"
                    "71"
                    "0200000000000000"
                    "6932")));
  EXPECT_EQ(Exchange(*c,
                     "10"
                     "0100000000000000"
                     "71",
                     8),
            "0200000000000000");
  // A non-empty queue is present for CHECK.
  EXPECT_EQ(Exchange(*c,
                     "05"
                     "0100000000000000"
                     "0100000000000000"
                     "71",
                     1),
            "00");
  // QUEUE_POP: the queue's length BEFORE the pop (i64 2 here, as recorded from torch 2.13's
  // server; the hand-derived fixture said 1), then the item, first in first out.
  EXPECT_EQ(Exchange(*c,
                     "0f"
                     "0100000000000000"
                     "71",
                     8 + 10),
            "0200000000000000"
            "0200000000000000"
            "6931");
  EXPECT_EQ(Exchange(*c,
                     "0f"
                     "0100000000000000"
                     "71",
                     8 + 10),
            "0100000000000000"
            "0200000000000000"
            "6932");
  EXPECT_EQ(Exchange(*c,
                     "0f"
                     "0100000000000000"
                     "71",
                     8),
            "0000000000000000");
}

TEST_F(V2FixtureTest, QueuePushWakesAWaiter) {
  auto waiter = Open();
  auto pusher = Open();
  ASSERT_TRUE(
      waiter->Send(Unhex("06"
                         "0100000000000000"
                         "0100000000000000"
                         "71")));  // WAIT [q]
  EXPECT_EQ(Exchange(*pusher,
                     "0d"
                     "01000000",
                     4),
            "01000000");
  ASSERT_TRUE(
      pusher->Send(Unhex("0e"
                         "0100000000000000"
                         "71"
                         "0100000000000000"
                         "78")));
  EXPECT_EQ(Hex(*waiter->Recv(1)), "00");
}

// Two blocked consumers (WAIT [q], as torch 2.13's queue_pop sends before QUEUE_POP), one push:
// only one is answered, as torch 2.13's server does; the second push answers the other.
TEST_F(V2FixtureTest, QueuePushWakesOnlyOneWaiter) {
  auto first = Open();
  auto second = Open();
  auto pusher = Open();
  const std::string wait_q =
      "06"
      "0100000000000000"
      "0100000000000000"
      "71";
  ASSERT_TRUE(first->Send(Unhex(wait_q)));
  EXPECT_EQ(Exchange(*first, "0d01000000", 4), "01000000");  // PING: the WAIT is registered.
  ASSERT_TRUE(second->Send(Unhex(wait_q)));
  EXPECT_EQ(Exchange(*second, "0d02000000", 4), "02000000");
  const std::string push_q =
      "0e"
      "0100000000000000"
      "71"
      "0100000000000000"
      "78";
  ASSERT_TRUE(pusher->Send(Unhex(push_q)));
  EXPECT_EQ(Hex(*first->Recv(1)), "00");
  // The second consumer is still blocked: its next reply is PING's, not a STOP_WAITING.
  EXPECT_EQ(Exchange(*second, "0d03000000", 4), "03000000");
  ASSERT_TRUE(pusher->Send(Unhex(push_q)));
  EXPECT_EQ(Hex(*second->Recv(1)), "00");
}

// BARRIER 18: key, i64 world size; the counter is the key's decimal value; every caller is
// answered STOP_WAITING 0 once the count reaches the world size.
TEST_F(V2FixtureTest, BarrierReleasesEveryoneAtTheWorldSize) {
  auto a = Open();
  auto b = Open();
  const std::string barrier_b_2 =
      "12"
      "0100000000000000"
      "62"
      "0200000000000000";
  ASSERT_TRUE(a->Send(Unhex(barrier_b_2)));
  EXPECT_EQ(Exchange(*a, "0d01000000", 4), "01000000");  // a is waiting, not answered.
  EXPECT_EQ(Exchange(*b, barrier_b_2, 1), "00");
  EXPECT_EQ(Hex(*a->Recv(1)), "00");
  // GET b → "2".
  EXPECT_EQ(Exchange(*a,
                     "03"
                     "0100000000000000"
                     "62",
                     9),
            "0100000000000000"
            "32");
  // A third arrival with world size 2 passes at once (count 3 >= 2), as torch 2.13's does.
  EXPECT_EQ(Exchange(*a, barrier_b_2, 1), "00");
}

TEST_F(V2FixtureTest, BarrierTimeoutIsCanceledAndTheCountStays) {
  auto a = Open();
  // As recorded: BARRIER "/b2" 2, then CANCEL_WAIT when the client's timeout passes.
  ASSERT_TRUE(a->Send(Unhex("1203000000000000002f62320200000000000000")));
  EXPECT_EQ(Exchange(*a, "0c", 1), "01");
  EXPECT_EQ(Exchange(*a, "0303000000000000002f6232", 9), "010000000000000031");  // "1"
}

TEST_F(V2FixtureTest, BarrierWaiterIsWokenByASetOfItsKey) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(
      a->Send(Unhex("12"
                    "0100000000000000"
                    "62"
                    "0500000000000000")));  // BARRIER b 5
  EXPECT_EQ(Exchange(*a, "0d01000000", 4), "01000000");
  ASSERT_TRUE(
      b->Send(Unhex("01"
                    "0100000000000000"
                    "62"
                    "0100000000000000"
                    "37")));  // SET b "7": torch 2.13 wakes the barrier's waiters.
  EXPECT_EQ(Hex(*a->Recv(1)), "00");
}

TEST_F(V2FixtureTest, BarrierOnANonIntegerValueClosesTheConnection) {
  auto a = Open();
  ASSERT_TRUE(
      a->Send(Unhex("01"
                    "0100000000000000"
                    "74"
                    "0300000000000000"
                    "616263")));  // SET t "abc"
  ASSERT_TRUE(
      a->Send(Unhex("12"
                    "0100000000000000"
                    "74"
                    "0200000000000000")));
  EXPECT_TRUE(a->ClosedByPeer());
}

TEST_F(V2FixtureTest, ListKeys) {
  auto c = Open();
  ASSERT_TRUE(
      c->Send(Unhex("01"
                    "0100000000000000"
                    "62"
                    "0000000000000000")));  // SET b
  ASSERT_TRUE(
      c->Send(Unhex("01"
                    "0100000000000000"
                    "61"
                    "0000000000000000")));  // SET a
  // LIST_KEYS 17 (0x11) → i64 2, "a", "b" (sorted).
  EXPECT_EQ(Exchange(*c, "11", 8 + 9 + 9),
            "0200000000000000"
            "0100000000000000"
            "61"
            "0100000000000000"
            "62");
}

TEST_F(V2FixtureTest, OneXOnlyOpcodeAndUnknownOpcodeClose) {
  auto c = Open();
  // 19 and above (past torch 2.13's BARRIER 18) are not served: closed with a logged reason.
  ASSERT_TRUE(c->Send(Unhex("13")));
  EXPECT_TRUE(c->ClosedByPeer());
}

}  // namespace
}  // namespace dgt::store
