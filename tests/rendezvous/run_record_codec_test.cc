// The run record codec (rendezvous/run_record_codec.h): the JSON round trip of a run and of a node
// bucket, the version check, the node buckets, and the errors of values that do not decode.
#include "rendezvous/run_record_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dgt::rendezvous {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RunRecordCodecTest, TheJsonValueIsVersionedAndRoundTrips) {
  RunRecord run;
  run.run_id = "job";
  run.round = 2;
  run.spare_nodes = 3;
  run.in_place_spares = true;
  run.last_call_deadline = absl::InfiniteFuture();
  run.closed_at = absl::FromUnixNanos(1'700'000'000'123'456'789);
  run.finished.failure = WorkerFailure{1, 0, 0, 9, "n1", absl::FromUnixSeconds(5)};
  run.finished.too_few_nodes = true;
  std::string writer;
  int buckets = 0;
  absl::StatusOr<RunRecord> back =
      DecodeRunRecord(EncodeRunRecord(run, "r:1", 7), &writer, &buckets);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, run);
  EXPECT_EQ(writer, "r:1");
  EXPECT_EQ(buckets, 7);
  EXPECT_THAT(EncodeRunRecord(run, "r:1"), HasSubstr("\"version\":2"));

  // The nodes live in bucket keys, not in the run's value.
  NodeRecord n1{"n1", 3, "10.0.0.1", 8, 29500, 0, true, false, absl::FromUnixNanos(42)};
  NodeRecord n2{"n2", 0, "10.0.0.2", 8, 0, -1, false, true, absl::InfinitePast()};
  run.nodes = {{"n1", n1}, {"n2", n2}};
  EXPECT_THAT(EncodeRunRecord(run, "r:1"), Not(HasSubstr("10.0.0.1")));
  EXPECT_EQ(EncodeNodeBucket({&n1}),
            R"({"nodes":[["n1",3,"10.0.0.1",8,29500,0,true,false,42]],"version":2})");
  absl::StatusOr<std::vector<NodeRecord>> nodes = DecodeNodeBucket(EncodeNodeBucket({&n1, &n2}));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(*nodes, (std::vector<NodeRecord>{n1, n2}));
  EXPECT_EQ(DecodeNodeBucket(R"({"version":2,"nodes":[["n1"]]})").status().message(),
            "node bucket: a node is not an array of 9");

  // One bucket per 32 nodes, 1..100; a node's bucket is stable.
  EXPECT_EQ(NodeBuckets(0), 1);
  EXPECT_EQ(NodeBuckets(33), 2);
  EXPECT_EQ(NodeBuckets(1000), 32);
  EXPECT_EQ(NodeBuckets(10000), 100);
  EXPECT_EQ(NodeBucket("node-100000", 1), 0);
  EXPECT_EQ(NodeBucket("a", 100), NodeBucket("a", 100));

  absl::StatusOr<RunRecord> older = DecodeRunRecord(R"({"version":1,"writer":"x","run":{}})");
  EXPECT_EQ(older.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(older.status().message(), "run record: version 1 (this dgt reads version 2)");
  EXPECT_EQ(DecodeRunRecord("{").status().message(), "run record: not a JSON object");
  EXPECT_EQ(DecodeRunRecord(R"({"version":2,"writer":"x","buckets":1,"run":{}})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DecodeRunRecord(R"({"version":2,"writer":"x","buckets":0,"run":{}})").status().message(),
      "run record: \"buckets\" 0 is not in 1..100");
}

TEST(RunRecordCodecTest, ARecordWrittenWithoutTooFewNodesIsNotTooFew) {
  RunRecord run;
  run.run_id = "job";
  run.finished.too_few_nodes = true;
  std::string value = EncodeRunRecord(run, "r:1");
  const std::string field = ",\"too_few_nodes\":true";
  const size_t at = value.find(field);
  ASSERT_NE(at, std::string::npos) << value;
  value.erase(at, field.size());  // As a replica of an earlier version wrote it.
  absl::StatusOr<RunRecord> back = DecodeRunRecord(value);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->finished.too_few_nodes);
}

TEST(RunRecordCodecTest, ARecordWrittenWithoutSpareNodesHasNone) {
  RunRecord run;
  run.run_id = "job";
  run.spare_nodes = 3;
  std::string value = EncodeRunRecord(run, "r:1");
  const std::string field = "\"spare_nodes\":3,";
  const size_t at = value.find(field);
  ASSERT_NE(at, std::string::npos) << value;
  value.erase(at, field.size());  // As a replica without spares wrote it.
  absl::StatusOr<RunRecord> back = DecodeRunRecord(value);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spare_nodes, 0);
}

TEST(RunRecordCodecTest, ARecordWrittenWithoutInPlaceSparesHasThemOff) {
  RunRecord run;
  run.run_id = "job";
  run.in_place_spares = true;
  std::string value = EncodeRunRecord(run, "r:1");
  const std::string field = "\"in_place_spares\":true,";
  const size_t at = value.find(field);
  ASSERT_NE(at, std::string::npos) << value;
  value.erase(at, field.size());  // As a replica without in-place spares wrote it.
  absl::StatusOr<RunRecord> back = DecodeRunRecord(value);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->in_place_spares);
}

TEST(RunRecordCodecTest, ValuesOfTheWrongShapeAreInvalidArgumentNamingTheField) {
  EXPECT_EQ(
      DecodeRunRecord(R"({"version":2,"writer":"x","buckets":1,"run":{}})").status().message(),
      "run record: no \"run_id\"");
  EXPECT_EQ(DecodeRunRecord(R"({"version":2,"writer":7,"buckets":1,"run":{}})").status().message(),
            "run record: \"writer\" is not a string");
  EXPECT_EQ(DecodeRunRecord(R"({"version":"2"})").status().message(),
            "run record: no integer \"version\"");
  RunRecord run;
  run.run_id = "job";
  std::string value = EncodeRunRecord(run, "r:1");
  const std::string state = "\"state\":\"gathering\"";
  ASSERT_NE(value.find(state), std::string::npos) << value;
  value.replace(value.find(state), state.size(), "\"state\":\"lost\"");
  absl::StatusOr<RunRecord> bad_state = DecodeRunRecord(value);
  EXPECT_EQ(bad_state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_state.status().message(), "run record: unknown state 'lost'");
  EXPECT_EQ(DecodeNodeBucket(R"({"version":2,"nodes":[["n1",1,"a",8,0,0,"yes",false,0]]})")
                .status()
                .message(),
            "node bucket: \"succeeded\" is not a boolean");
  EXPECT_EQ(DecodeNodeBucket(R"({"version":2,"nodes":{}})").status().message(),
            "node bucket: \"nodes\" is not an array");
  EXPECT_EQ(DecodeNodeBucket(R"({"version":1,"nodes":[]})").status().code(),
            absl::StatusCode::kUnimplemented);
}

// The widest entry a node can have: every number at its most digits, control bytes in its id.
TEST(RunRecordCodecTest, TheNodeEntryBoundIsTheWidestEntryItsIdAndAddressAllow) {
  NodeRecord n;
  n.node_id = std::string("node\x01\"a", 7);
  n.session = std::numeric_limits<SessionId>::max();
  n.address = "10.0.0.1";
  n.nproc = std::numeric_limits<int32_t>::min();
  n.store_port = std::numeric_limits<int32_t>::min();
  n.node_rank = std::numeric_limits<int32_t>::min();
  n.last_contact = absl::FromUnixNanos(std::numeric_limits<int64_t>::min());
  const std::string empty_bucket = EncodeNodeBucket({});
  const std::string one = EncodeNodeBucket({&n});
  const std::string two = EncodeNodeBucket({&n, &n});
  // One entry and the comma before the next one.
  const int64_t entry = static_cast<int64_t>(two.size() - one.size());
  EXPECT_EQ(entry, static_cast<int64_t>(one.size() - empty_bucket.size()) + 1);
  EXPECT_EQ(NodeEntryBytesBound(n.node_id, n.address), entry);
  // "node" 4 + \u0001 6 + \" 2 + "a" 1 + quotes 2 = 15; "10.0.0.1" 10; the rest 94.
  EXPECT_EQ(entry, 15 + 10 + 94);
}

TEST(RunRecordCodecTest, ARunTooLargeForOneEtcdWriteIsRefusedNamingTheLimit) {
  // node-110000 and 127.0.0.1: 13 + 11 + 94 = 118 bytes per node.
  ASSERT_EQ(NodeEntryBytesBound("node-110000", "127.0.0.1"), 118);
  const int64_t limit = kEtcdDefaultMaxRequestBytes;          // 1,572,864
  const int64_t fit = (limit - kRunWriteReserveBytes) / 118;  // 11,107
  ASSERT_EQ(fit, 11107);
  EXPECT_TRUE(CheckRunFitsRequest(fit, "node-110000", "127.0.0.1", limit).ok());
  absl::Status refused = CheckRunFitsRequest(25000, "node-110000", "127.0.0.1", limit);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "--nnodes MAX with --spare-nodes: 25000 nodes need up to 3212144 bytes in one etcd "
            "write; this dgt-rendezvous allows 1572864 (--etcd-max-request-bytes, as etcd's "
            "--max-request-bytes), enough for 11107 nodes like this one");
  EXPECT_EQ(CheckRunFitsRequest(fit + 1, "node-110000", "127.0.0.1", limit).code(),
            absl::StatusCode::kInvalidArgument);
  // 8 MiB holds 25,000 of them.
  EXPECT_TRUE(CheckRunFitsRequest(25000, "node-110000", "127.0.0.1", int64_t{8} << 20).ok());
}

}  // namespace
}  // namespace dgt::rendezvous
