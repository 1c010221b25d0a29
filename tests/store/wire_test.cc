// Byte-level tests of the TCPStore frame parser. 1.x frames are copied from the recording of a
// real torch 1.13 client in shared/fixtures/torch-1.13-tcpstore/client-ops.json; 2.x frames are
// derived by hand from REFERENCE.md §4 (opcode numbers of torch 2.x QueryType).
#include "store/wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/hex.h"

namespace dgt::store::wire {
namespace {

using ::dgt::testing::Hex;
using ::dgt::testing::Unhex;

Request ParseOk(const std::string& bytes, Family family) {
  Request r;
  ParseResult p = ParseRequest(bytes, family, Limits{}, &r);
  EXPECT_EQ(p.status, ParseStatus::kOk) << p.error;
  EXPECT_EQ(p.consumed, bytes.size());
  return r;
}

TEST(DetectFamilyTest, V2OpensWithValidate) {
  EXPECT_EQ(DetectFamily(""), Family::kUnknown);
  EXPECT_EQ(DetectFamily(Unhex("00")), Family::kUnknown);
  EXPECT_EQ(DetectFamily(Unhex("00cef7")), Family::kUnknown);
  EXPECT_EQ(DetectFamily(Unhex("00cef7853c")), Family::kV2);
  // torch 1.13's first request, ADD "init/" 1 (client-ops.json chunk 0).
  EXPECT_EQ(DetectFamily(Unhex("030500000000000000696e69742f0100000000000000")), Family::kV1);
  // A 1.x SET starts 00 then a key length; it is never the magic.
  EXPECT_EQ(DetectFamily(Unhex("000400000000000000")), Family::kV1);
  EXPECT_EQ(DetectFamily(Unhex("0004")), Family::kV1);
}

TEST(ParseV1Test, RecordedTorch113Frames) {
  Request add = ParseOk(Unhex("030500000000000000696e69742f0100000000000000"), Family::kV1);
  EXPECT_EQ(add.op, Op::kAdd);
  EXPECT_EQ(add.keys[0], "init/");
  EXPECT_EQ(add.integer, 1);

  Request set = ParseOk(Unhex("0004000000000000002f6b6579050000000000000076616c7565"), Family::kV1);
  EXPECT_EQ(set.op, Op::kSet);
  EXPECT_EQ(set.keys[0], "/key");
  EXPECT_EQ(set.values[0], "value");

  Request wait = ParseOk(Unhex("05010000000000000004000000000000002f6b6579"), Family::kV1);
  EXPECT_EQ(wait.op, Op::kWait);
  ASSERT_EQ(wait.keys.size(), 1u);
  EXPECT_EQ(wait.keys[0], "/key");

  Request get = ParseOk(Unhex("0204000000000000002f6b6579"), Family::kV1);
  EXPECT_EQ(get.op, Op::kGet);
  EXPECT_EQ(get.keys[0], "/key");

  Request cas =
      ParseOk(Unhex("0104000000000000002f6b6579050000000000000076616c756502000000000000007632"),
              Family::kV1);
  EXPECT_EQ(cas.op, Op::kCompareSet);
  EXPECT_EQ(cas.keys[0], "/key");
  EXPECT_EQ(cas.values[0], "value");
  EXPECT_EQ(cas.values[1], "v2");

  Request cas_missing =
      ParseOk(Unhex("0108000000000000002f6d697373696e67000000000000000003000000000000006e6577"),
              Family::kV1);
  EXPECT_EQ(cas_missing.keys[0], "/missing");
  EXPECT_EQ(cas_missing.values[0], "");
  EXPECT_EQ(cas_missing.values[1], "new");

  EXPECT_EQ(ParseOk(Unhex("06"), Family::kV1).op, Op::kGetNumKeys);
  Request del = ParseOk(Unhex("0804000000000000002f6b6579"), Family::kV1);
  EXPECT_EQ(del.op, Op::kDeleteKey);
  EXPECT_EQ(del.keys[0], "/key");
}

TEST(ParseV1Test, EveryPrefixNeedsMore) {
  // The recording shows COMPARE_SET split after its opcode byte: every proper prefix of a frame
  // must ask for more bytes, never fail.
  std::string frame =
      Unhex("0104000000000000002f6b6579050000000000000076616c756502000000000000007632");
  for (size_t n = 0; n < frame.size(); ++n) {
    Request r;
    ParseResult p = ParseRequest(frame.substr(0, n), Family::kV1, Limits{}, &r);
    EXPECT_EQ(p.status, ParseStatus::kNeedMore) << "prefix " << n;
  }
}

TEST(ParseV1Test, TwoFramesBackToBack) {
  std::string two = Unhex("06") + Unhex("0204000000000000002f6b6579");
  Request r;
  ParseResult p = ParseRequest(two, Family::kV1, Limits{}, &r);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.consumed, 1u);
  EXPECT_EQ(r.op, Op::kGetNumKeys);
}

TEST(ParseV2Test, HandDerivedFrames) {
  Request validate = ParseOk(Unhex("00cef7853c"), Family::kV2);
  EXPECT_EQ(validate.op, Op::kValidate);
  EXPECT_EQ(validate.u32, kValidationMagic);

  Request ping = ParseOk(Unhex("0d78563412"), Family::kV2);
  EXPECT_EQ(ping.op, Op::kPing);
  EXPECT_EQ(ping.u32, 0x12345678u);

  Request set = ParseOk(Unhex("01"
                              "0100000000000000"
                              "61"
                              "0200000000000000"
                              "7879"),
                        Family::kV2);
  EXPECT_EQ(set.op, Op::kSet);
  EXPECT_EQ(set.keys[0], "a");
  EXPECT_EQ(set.values[0], "xy");

  Request multi_set = ParseOk(Unhex("0b"
                                    "0200000000000000"
                                    "0100000000000000"
                                    "61"
                                    "0100000000000000"
                                    "31"
                                    "0100000000000000"
                                    "62"
                                    "0000000000000000"),
                              Family::kV2);
  EXPECT_EQ(multi_set.op, Op::kMultiSet);
  ASSERT_EQ(multi_set.keys.size(), 2u);
  EXPECT_EQ(multi_set.keys[1], "b");
  EXPECT_EQ(multi_set.values[0], "1");
  EXPECT_EQ(multi_set.values[1], "");

  EXPECT_EQ(ParseOk(Unhex("0c"), Family::kV2).op, Op::kCancelWait);
  EXPECT_EQ(ParseOk(Unhex("10"
                          "0100000000000000"
                          "71"),
                    Family::kV2)
                .op,
            Op::kQueueLen);
  EXPECT_EQ(ParseOk(Unhex("0f"
                          "0100000000000000"
                          "71"),
                    Family::kV2)
                .op,
            Op::kQueuePop);
  EXPECT_EQ(ParseOk(Unhex("09"
                          "0100000000000000"
                          "61"
                          "0100000000000000"
                          "7a"),
                    Family::kV2)
                .op,
            Op::kAppend);
}

// One Request parsed into again and again, as the server does: every request reads exactly its
// own fields, whatever the one before left behind.
TEST(ParseTest, AReusedRequestHoldsOnlyTheLatestRequest) {
  Request r;
  auto parse = [&](const std::string& hex) {
    const std::string bytes = Unhex(hex);
    ParseResult p = ParseRequest(bytes, Family::kV2, Limits{}, &r);
    ASSERT_EQ(p.status, ParseStatus::kOk) << p.error;
    ASSERT_EQ(p.consumed, bytes.size());
  };
  const std::string long_value(40, 'v');  // Past std::string's inline storage.
  // COMPARE_SET "k" expected=40 x 'v' desired="d".
  parse(
      "02"
      "0100000000000000"
      "6b"
      "2800000000000000" +
      Hex(long_value) +
      "0100000000000000"
      "64");
  EXPECT_EQ(r.op, Op::kCompareSet);
  EXPECT_EQ(r.keys, std::vector<std::string>({"k"}));
  EXPECT_EQ(r.values, std::vector<std::string>({long_value, "d"}));
  // CHECK of two keys "a", "bb".
  parse(
      "05"
      "0200000000000000"
      "0100000000000000"
      "61"
      "0200000000000000"
      "6262");
  EXPECT_EQ(r.op, Op::kCheck);
  EXPECT_EQ(r.keys, std::vector<std::string>({"a", "bb"}));
  EXPECT_TRUE(r.values.empty());
  // PING 7.
  parse(
      "0d"
      "07000000");
  EXPECT_EQ(r.op, Op::kPing);
  EXPECT_EQ(r.u32, 7u);
  EXPECT_TRUE(r.keys.empty());
  EXPECT_TRUE(r.values.empty());
  // SET "x" "y".
  parse(
      "01"
      "0100000000000000"
      "78"
      "0100000000000000"
      "79");
  EXPECT_EQ(r.op, Op::kSet);
  EXPECT_EQ(r.keys, std::vector<std::string>({"x"}));
  EXPECT_EQ(r.values, std::vector<std::string>({"y"}));
  EXPECT_EQ(r.u32, 0u);
  // ADD "c" 5.
  parse(
      "04"
      "0100000000000000"
      "63"
      "0500000000000000");
  EXPECT_EQ(r.op, Op::kAdd);
  EXPECT_EQ(r.keys, std::vector<std::string>({"c"}));
  EXPECT_TRUE(r.values.empty());
  EXPECT_EQ(r.integer, 5);
}

TEST(ParseTest, UnknownOpcodesAreErrors) {
  Request r;
  ParseResult v1 = ParseRequest(Unhex("09"), Family::kV1, Limits{}, &r);
  EXPECT_EQ(v1.status, ParseStatus::kError);
  EXPECT_EQ(v1.error, "unknown opcode 9 for the torch 1.x protocol");
  ParseResult v2 = ParseRequest(Unhex("ff"), Family::kV2, Limits{}, &r);
  EXPECT_EQ(v2.status, ParseStatus::kError);
  EXPECT_EQ(v2.error, "unknown opcode 255 for the torch 2.x protocol");
}

TEST(ParseTest, OverLimitLengthsFailBeforeTheBytesArrive) {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_keys_per_request = 4;
  Request r;
  // GET with a claimed key length of 2^40: rejected from the 9-byte header alone.
  ParseResult huge = ParseRequest(Unhex("020000000000010000"), Family::kV1, limits, &r);
  EXPECT_EQ(huge.status, ParseStatus::kError);
  EXPECT_EQ(huge.error, "key length 1099511627776 exceeds the limit of 16 bytes");
  ParseResult value = ParseRequest(Unhex("00"
                                         "0100000000000000"
                                         "61"
                                         "2100000000000000"),
                                   Family::kV1, limits, &r);
  EXPECT_EQ(value.status, ParseStatus::kError);
  EXPECT_EQ(value.error, "value length 33 exceeds the limit of 32 bytes");
  ParseResult count = ParseRequest(Unhex("05"
                                         "0500000000000000"),
                                   Family::kV1, limits, &r);
  EXPECT_EQ(count.status, ParseStatus::kError);
  EXPECT_EQ(count.error, "key count 5 exceeds the limit of 4");
}

TEST(EncodeTest, RepliesAreHostOrder) {
  std::string out;
  AppendI64(&out, 7);
  EXPECT_EQ(Hex(out), "0700000000000000");
  out.clear();
  AppendBytes(&out, "v2");
  EXPECT_EQ(Hex(out), "02000000000000007632");
  out.clear();
  AppendOpcode(&out, Family::kV1, Op::kGet);
  AppendOpcode(&out, Family::kV2, Op::kGet);
  EXPECT_EQ(Hex(out), "0203");
}

TEST(EncodeTest, AppendRequestIsParseRequestsInverse) {
  const Limits limits;
  std::vector<Request> requests(5);
  requests[0].op = Op::kSet;
  requests[0].keys = {"/k"};
  requests[0].values = {"v"};
  requests[1].op = Op::kCompareSet;
  requests[1].keys = {"k"};
  requests[1].values = {"", "1"};
  requests[2].op = Op::kAdd;
  requests[2].keys = {"n"};
  requests[2].integer = -3;
  requests[3].op = Op::kWait;
  requests[3].keys = {"a", "b"};
  requests[4].op = Op::kDeleteKey;
  requests[4].keys = {"d"};
  for (Family family : {Family::kV1, Family::kV2}) {
    for (const Request& want : requests) {
      std::string frame;
      ASSERT_TRUE(AppendRequest(&frame, family, want));
      Request got;
      ParseResult p = ParseRequest(frame, family, limits, &got);
      ASSERT_EQ(p.status, ParseStatus::kOk);
      EXPECT_EQ(p.consumed, frame.size());
      EXPECT_EQ(got.op, want.op);
      EXPECT_EQ(got.keys, want.keys);
      EXPECT_EQ(got.values, want.values);
      EXPECT_EQ(got.integer, want.integer);
    }
  }
  // torch 1.x SET of "/k" = "v": opcode 0, u64 2, "/k", u64 1, "v".
  std::string v1;
  ASSERT_TRUE(AppendRequest(&v1, Family::kV1, requests[0]));
  EXPECT_EQ(Hex(v1), "0002000000000000002f6b010000000000000076");
  Request append;
  append.op = Op::kAppend;
  std::string none;
  EXPECT_FALSE(AppendRequest(&none, Family::kV1, append));
  EXPECT_TRUE(none.empty());
}

TEST(ParseReplyTest, EveryShapeNeedsItsWholeReply) {
  const Limits limits;
  Reply r;
  std::string value;
  AppendBytes(&value, "abc");
  for (size_t n = 0; n < value.size(); ++n) {
    EXPECT_EQ(ParseReply(value.substr(0, n), ReplyShape::kBytes, limits, &r).status,
              ParseStatus::kNeedMore);
  }
  ParseResult p = ParseReply(value + "x", ReplyShape::kBytes, limits, &r);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.consumed, 11u);
  EXPECT_EQ(r.bytes, "abc");
  std::string i64;
  AppendI64(&i64, -9);
  p = ParseReply(i64, ReplyShape::kI64, limits, &r);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(r.integer, -9);
  p = ParseReply(std::string(1, '\x01'), ReplyShape::kU8, limits, &r);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(r.u8, 1);
  EXPECT_EQ(ParseReply("abc", ReplyShape::kU32, limits, &r).status, ParseStatus::kNeedMore);
}

TEST(ParseReplyTest, AClaimedLengthOverTheLimitIsAnErrorBeforeItArrives) {
  Limits limits;
  limits.max_value_bytes = 8;
  std::string claim;
  AppendU64(&claim, 9);
  Reply r;
  ParseResult p = ParseReply(claim, ReplyShape::kBytes, limits, &r);
  EXPECT_EQ(p.status, ParseStatus::kError);
  EXPECT_EQ(p.error, "value length 9 exceeds the limit of 8 bytes");
}

}  // namespace
}  // namespace dgt::store::wire
