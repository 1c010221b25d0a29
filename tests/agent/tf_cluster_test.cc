// The TensorFlow address exchange of a multi-node round over an in-memory store, and the
// TF_CONFIG every node then builds from it.
#include "agent/tf_cluster.h"

#include <string>
#include <vector>

#include "agent/worker_env.h"
#include "dgt/store/memory_store.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

TEST(TfClusterTest, KeyAndValue) {
  EXPECT_EQ(TfAddressesKey(3, 1), "dgt/tf/3/1");
  EXPECT_EQ(EncodeTfAddresses({"10.0.0.2:41001", "10.0.0.2:41002"}),
            R"(["10.0.0.2:41001","10.0.0.2:41002"])");
  auto decoded = DecodeTfAddresses(R"(["a:1","a:2"])", 1, 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, (std::vector<std::string>{"a:1", "a:2"}));
}

TEST(TfClusterTest, BadValuesNameTheNodeAndTheValue) {
  struct Case {
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a:1",
       "TF_CONFIG addresses of node rank 1 must be a JSON array of 2 host:port strings, "
       "got 'a:1'"},
      {R"(["a:1"])",
       "TF_CONFIG addresses of node rank 1 must be 2 address(es), one per worker "
       "(--nproc-per-node), got '[\"a:1\"]'"},
      {R"(["a:1",2])",
       "TF_CONFIG addresses of node rank 1 must be non-empty host:port strings, got "
       "'[\"a:1\",2]'"},
      {R"(["a:1",""])",
       "TF_CONFIG addresses of node rank 1 must be non-empty host:port strings, got "
       "'[\"a:1\",\"\"]'"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodeTfAddresses(c.value, 1, 2);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.value;
    EXPECT_EQ(decoded.status().message(), c.message);
  }
}

TEST(TfClusterTest, EveryNodeGetsTheSameAddressesInGlobalRankOrder) {
  store::MemoryStore s;
  const std::vector<std::string> node0 = {"10.0.0.1:5000", "10.0.0.1:5001"};
  const std::vector<std::string> node1 = {"10.0.0.2:6000", "10.0.0.2:6001"};
  const std::vector<std::string> node2 = {"10.0.0.3:7000", "10.0.0.3:7001"};

  // Node rank 1 first: nodes 0 and 2 have not published yet.
  auto first = ExchangeTfAddresses(s, 4, 1, 3, 2, node1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->missing, (std::vector<int>{0, 2}));
  EXPECT_TRUE(first->addresses.empty());
  EXPECT_EQ(*s.Get("dgt/tf/4/1"), R"(["10.0.0.2:6000","10.0.0.2:6001"])");

  // Another round's key does not count for round 4.
  ASSERT_TRUE(s.Set(TfAddressesKey(3, 2), EncodeTfAddresses(node2)).ok());
  auto second = ExchangeTfAddresses(s, 4, 0, 3, 2, node0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->missing, (std::vector<int>{2}));

  auto last = ExchangeTfAddresses(s, 4, 2, 3, 2, node2);
  ASSERT_TRUE(last.ok());
  const std::vector<std::string> all = {"10.0.0.1:5000", "10.0.0.1:5001", "10.0.0.2:6000",
                                        "10.0.0.2:6001", "10.0.0.3:7000", "10.0.0.3:7001"};
  EXPECT_TRUE(last->missing.empty());
  EXPECT_EQ(last->addresses, all);
  // The step repeated by the nodes that were waiting: the same list on each.
  for (int node = 0; node < 2; ++node) {
    auto again = ExchangeTfAddresses(s, 4, node, 3, 2, node == 0 ? node0 : node1);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->addresses, all) << "node rank " << node;
  }

  // The TF_CONFIG of global rank 3 (node rank 1, local rank 1) with 1 ps and a chief, as every
  // node builds it from that list.
  EXPECT_EQ(BuildTfConfig(all, 1, true, 3),
            R"({"cluster":{"ps":["10.0.0.1:5000"],"chief":["10.0.0.1:5001"],)"
            R"("worker":["10.0.0.2:6000","10.0.0.2:6001","10.0.0.3:7000","10.0.0.3:7001"]},)"
            R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(all, 0, false, 0),
            R"({"cluster":{"worker":["10.0.0.1:5000","10.0.0.1:5001","10.0.0.2:6000",)"
            R"("10.0.0.2:6001","10.0.0.3:7000","10.0.0.3:7001"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(TfClusterTest, ANewRoundPublishesAgain) {
  store::MemoryStore s;
  ASSERT_TRUE(ExchangeTfAddresses(s, 0, 0, 2, 1, {"a:1"}).ok());
  auto round0 = ExchangeTfAddresses(s, 0, 1, 2, 1, {"b:1"});
  ASSERT_TRUE(round0.ok());
  EXPECT_EQ(round0->addresses, (std::vector<std::string>{"a:1", "b:1"}));
  // Round 1 (a group restart; here on the same store) waits for its own keys.
  auto round1 = ExchangeTfAddresses(s, 1, 1, 2, 1, {"b:1"});
  ASSERT_TRUE(round1.ok());
  EXPECT_EQ(round1->missing, (std::vector<int>{0}));
}

TEST(TfClusterTest, AnotherNodesBadValueIsAnError) {
  store::MemoryStore s;
  ASSERT_TRUE(s.Set(TfAddressesKey(0, 0), R"(["a:1"])").ok());  // 1 address, 2 expected.
  auto step = ExchangeTfAddresses(s, 0, 1, 2, 2, {"b:1", "b:2"});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step.status().message(),
            "TF_CONFIG addresses of node rank 0 must be 2 address(es), one per worker "
            "(--nproc-per-node), got '[\"a:1\"]'");
}

}  // namespace
}  // namespace dgt::agent
