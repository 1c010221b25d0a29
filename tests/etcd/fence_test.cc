// etcd::LeaderFence (etcd/fence.h) without etcd: the compare and the read it adds to a Txn, its
// refusal without a term, and how it reads a Txn that did not succeed.
#include "etcd/fence.h"

#include <gtest/gtest.h>

#include <vector>

namespace dgt::etcd {
namespace {

TxnResult FailedTxnReading(int64_t holder_create_revision) {
  TxnResult txn;
  txn.succeeded = false;
  RangeResult read;
  if (holder_create_revision != 0) {
    KeyValue kv;
    kv.key = "/r.leader";
    kv.create_revision = holder_create_revision;
    read.kvs.push_back(kv);
  }
  txn.results.push_back(read);
  return txn;
}

TEST(LeaderFenceTest, GuardAddsTheCompareAndTheReadOfTheLeaderKey) {
  LeaderFence fence("/r.leader", "runs");
  EXPECT_TRUE(fence.enabled());
  fence.set_term(42);
  EXPECT_EQ(fence.term(), 42);
  std::vector<Compare> compares;
  std::vector<Op> otherwise;
  ASSERT_TRUE(fence.Guard(fence.term(), compares, otherwise).ok());
  ASSERT_EQ(compares.size(), 1u);
  EXPECT_EQ(compares[0].key, "/r.leader");
  EXPECT_EQ(compares[0].target, Compare::Target::kCreateRevision);
  EXPECT_EQ(compares[0].result, Compare::Result::kEqual);
  EXPECT_EQ(compares[0].number, 42);
  ASSERT_EQ(otherwise.size(), 1u);
  EXPECT_EQ(otherwise[0].type, Op::Type::kGet);
  EXPECT_EQ(otherwise[0].key, "/r.leader");
}

TEST(LeaderFenceTest, WithoutATermEveryWriteIsRefused) {
  LeaderFence fence("/r.leader", "jobs");
  std::vector<Compare> compares;
  std::vector<Op> otherwise;
  absl::Status s = fence.Guard(0, compares, otherwise);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "fenced: this replica holds no leader key (/r.leader): only the leader writes jobs");
  EXPECT_TRUE(compares.empty());
  EXPECT_TRUE(otherwise.empty());
}

TEST(LeaderFenceTest, CheckNamesTheHolderAndTheTerm) {
  LeaderFence fence("/r.leader", "runs");
  TxnResult ok;
  ok.succeeded = true;
  EXPECT_TRUE(fence.Check(7, ok, 0).ok());
  // Another compare failed; the leader key is still this term's.
  EXPECT_TRUE(fence.Check(7, FailedTxnReading(7), 0).ok());
  absl::Status replaced = fence.Check(7, FailedTxnReading(9), 0);
  EXPECT_EQ(replaced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(replaced.message(),
            "fenced: the leader key /r.leader was created at revision 9, this replica's term "
            "began at revision 7: it is no longer the leader");
  EXPECT_EQ(fence.Check(7, FailedTxnReading(0), 0).message(),
            "fenced: the leader key /r.leader is gone, this replica's term began at revision 7: "
            "it is no longer the leader");
  // The read at another index of the else branch.
  TxnResult two = FailedTxnReading(9);
  two.results.insert(two.results.begin(), RangeResult{});
  EXPECT_TRUE(fence.Check(9, two, 1).ok());
  EXPECT_FALSE(fence.Check(9, two, 0).ok());
}

TEST(LeaderFenceTest, AnEmptyKeyTurnsTheFenceOff) {
  LeaderFence fence("", "runs");
  EXPECT_FALSE(fence.enabled());
  std::vector<Compare> compares;
  std::vector<Op> otherwise;
  EXPECT_TRUE(fence.Guard(0, compares, otherwise).ok());
  EXPECT_TRUE(compares.empty());
  EXPECT_TRUE(otherwise.empty());
  EXPECT_TRUE(fence.Check(0, FailedTxnReading(3), 0).ok());
}

}  // namespace
}  // namespace dgt::etcd
