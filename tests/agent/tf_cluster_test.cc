// The TensorFlow address exchange of a multi-node round over an in-memory store, and the
// TF_CONFIG every node then builds from it.
#include "agent/coord/tf_cluster.h"

#include <string>
#include <vector>

#include "agent/workers/worker_env.h"
#include "boost/asio.hpp"
#include "common/store_keys.h"
#include "dgt/store/async_client.h"
#include "dgt/store/memory_store.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

// Roles with no ps and no chief, `n` workers per node.
TfRoleConfig Nproc(int n) { return TfRoleConfig{0, false, 0, n}; }

TEST(TfClusterTest, KeyAndValue) {
  EXPECT_EQ(keys::TfAddressesKey(3, 1), "dgt/tf/3/1");
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
  auto first = ExchangeTfAddresses(s, 4, 1, 3, Nproc(2), node1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->missing, (std::vector<int>{0, 2}));
  EXPECT_TRUE(first->addresses.empty());
  EXPECT_EQ(*s.Get("dgt/tf/4/1"), R"(["10.0.0.2:6000","10.0.0.2:6001"])");

  // Another round's key does not count for round 4.
  ASSERT_TRUE(s.Set(keys::TfRolesKey(3, 2), EncodeTfRoles(Nproc(2))).ok());
  ASSERT_TRUE(s.Set(keys::TfAddressesKey(3, 2), EncodeTfAddresses(node2)).ok());
  auto second = ExchangeTfAddresses(s, 4, 0, 3, Nproc(2), node0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->missing, (std::vector<int>{2}));

  auto last = ExchangeTfAddresses(s, 4, 2, 3, Nproc(2), node2);
  ASSERT_TRUE(last.ok());
  const std::vector<std::string> all = {"10.0.0.1:5000", "10.0.0.1:5001", "10.0.0.2:6000",
                                        "10.0.0.2:6001", "10.0.0.3:7000", "10.0.0.3:7001"};
  EXPECT_TRUE(last->missing.empty());
  EXPECT_EQ(last->addresses, all);
  // The step repeated by the nodes that were waiting: the same list on each.
  for (int node = 0; node < 2; ++node) {
    auto again = ExchangeTfAddresses(s, 4, node, 3, Nproc(2), node == 0 ? node0 : node1);
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
  ASSERT_TRUE(ExchangeTfAddresses(s, 0, 0, 2, Nproc(1), {"a:1"}).ok());
  auto round0 = ExchangeTfAddresses(s, 0, 1, 2, Nproc(1), {"b:1"});
  ASSERT_TRUE(round0.ok());
  EXPECT_EQ(round0->addresses, (std::vector<std::string>{"a:1", "b:1"}));
  // Round 1 (a group restart; here on the same store) waits for its own keys.
  auto round1 = ExchangeTfAddresses(s, 1, 1, 2, Nproc(1), {"b:1"});
  ASSERT_TRUE(round1.ok());
  EXPECT_EQ(round1->missing, (std::vector<int>{0}));
}

TEST(TfClusterTest, AnotherNodesBadValueIsAnError) {
  store::MemoryStore s;
  ASSERT_TRUE(s.Set(keys::TfRolesKey(0, 0), EncodeTfRoles(Nproc(2))).ok());
  ASSERT_TRUE(s.Set(keys::TfAddressesKey(0, 0), R"(["a:1"])").ok());  // 1 address, 2 expected.
  auto step = ExchangeTfAddresses(s, 0, 1, 2, Nproc(2), {"b:1", "b:2"});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step.status().message(),
            "TF_CONFIG addresses of node rank 0 must be 2 address(es), one per worker "
            "(--nproc-per-node), got '[\"a:1\"]'");
}

TEST(TfClusterTest, RolesKeyAndValue) {
  EXPECT_EQ(keys::TfRolesKey(3, 1), "dgt/tf/3/1/roles");
  EXPECT_EQ(EncodeTfRoles(TfRoleConfig{1, true, 0, 2}),
            R"({"nproc_per_node":2,"parameter_server_count":1,"tf_chief":true,"worker_count":0})");
  EXPECT_TRUE(
      CheckTfRoles(EncodeTfRoles(TfRoleConfig{1, true, 0, 2}), 1, TfRoleConfig{1, true, 0, 2}, 0)
          .ok());
  absl::Status bad = CheckTfRoles("[1]", 1, Nproc(2), 0);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "TF_CONFIG roles of node rank 1 must be a JSON object with parameter_server_count, "
            "tf_chief, worker_count and nproc_per_node, got '[1]'");
}

// The mixed case: node 0 with --parameter-server-count 1 --tf-chief, node 1 with --tf-chief only.
// Without the check node 0 built {ps:[A],chief:[B],worker:[C,D]} and node 1 {chief:[A],
// worker:[B,C,D]}; now both refuse, each naming the flag and both values.
TEST(TfClusterTest, NodesWithDifferentRolesAreRefusedOnBoth) {
  store::MemoryStore s;
  const TfRoleConfig node0_roles{1, true, 0, 2};
  const TfRoleConfig node1_roles{0, true, 0, 2};
  auto first = ExchangeTfAddresses(s, 0, 0, 2, node0_roles, {"a:1", "a:2"});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->missing, (std::vector<int>{1}));
  auto node1 = ExchangeTfAddresses(s, 0, 1, 2, node1_roles, {"b:1", "b:2"});
  EXPECT_EQ(node1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(node1.status().message(),
            "TF_CONFIG: node rank 0 was started with --parameter-server-count=1, this node (node "
            "rank 1) with --parameter-server-count=0; the nodes would build different TensorFlow "
            "clusters: give every node the same --parameter-server-count, --tf-chief, "
            "--worker-count and --nproc-per-node");
  auto node0 = ExchangeTfAddresses(s, 0, 0, 2, node0_roles, {"a:1", "a:2"});
  EXPECT_EQ(node0.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(node0.status().message(),
            "TF_CONFIG: node rank 1 was started with --parameter-server-count=0, this node (node "
            "rank 0) with --parameter-server-count=1; the nodes would build different TensorFlow "
            "clusters: give every node the same --parameter-server-count, --tf-chief, "
            "--worker-count and --nproc-per-node");
  // Every differing flag is named.
  absl::Status all =
      CheckTfRoles(EncodeTfRoles(TfRoleConfig{0, false, 3, 4}), 2, TfRoleConfig{1, true, 0, 2}, 0);
  EXPECT_EQ(all.message(),
            "TF_CONFIG: node rank 2 was started with --parameter-server-count=0 no --tf-chief "
            "--worker-count=3 --nproc-per-node=4, this node (node rank 0) with "
            "--parameter-server-count=1 --tf-chief --worker-count=0 --nproc-per-node=2; the "
            "nodes would build different TensorFlow clusters: give every node the same "
            "--parameter-server-count, --tf-chief, --worker-count and --nproc-per-node");
}

// The agent's way: the same exchange over a store::AsyncClient against the real store server,
// with a node whose roles differ and an unreachable store.
TEST(TfClusterAsyncTest, ExchangesOverTheAsyncClient) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  store::AsyncClientOptions o;
  o.port = server.port();
  store::AsyncClient c(io.get_executor(), o);
  c.Connect(absl::Seconds(5), nullptr);
  auto step = [&](int node_rank, const TfRoleConfig& roles, const std::vector<std::string>& own) {
    std::vector<absl::StatusOr<TfExchangeStep>> results;
    ExchangeTfAddressesAsync(
        c, 2, node_rank, 2, roles, own, absl::Seconds(5),
        [&](const absl::StatusOr<TfExchangeStep>& r) { results.push_back(r); });
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (results.empty() && absl::Now() < deadline) {
      io.restart();
      io.run_for(std::chrono::milliseconds(5));
    }
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
    EXPECT_EQ(results.size(), 1u);
    return results.empty() ? absl::StatusOr<TfExchangeStep>(absl::UnknownError("not called"))
                           : results[0];
  };
  auto first = step(1, Nproc(2), {"b:1", "b:2"});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->missing, (std::vector<int>{0}));
  EXPECT_TRUE(first->addresses.empty());
  auto both = step(0, Nproc(2), {"a:1", "a:2"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->missing.empty());
  EXPECT_EQ(both->addresses, (std::vector<std::string>{"a:1", "a:2", "b:1", "b:2"}));
  // The keys the blocking exchange reads.
  store::MemoryStore mem;
  ASSERT_TRUE(mem.Set(keys::TfRolesKey(2, 1), EncodeTfRoles(Nproc(2))).ok());
  ASSERT_TRUE(mem.Set(keys::TfAddressesKey(2, 1), R"(["b:1","b:2"])").ok());
  auto blocking = ExchangeTfAddresses(mem, 2, 0, 2, Nproc(2), {"a:1", "a:2"});
  ASSERT_TRUE(blocking.ok());
  EXPECT_EQ(blocking->addresses, both->addresses);
  // Node rank 1 again, with other roles: refused, naming the flag.
  auto refused = step(1, TfRoleConfig{1, false, 0, 2}, {"b:1", "b:2"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "TF_CONFIG: node rank 0 was started with --parameter-server-count=0, this node (node "
            "rank 1) with --parameter-server-count=1; the nodes would build different TensorFlow "
            "clusters: give every node the same --parameter-server-count, --tf-chief, "
            "--worker-count and --nproc-per-node");
  // A bad value from another node.
  c.Set(keys::TfRolesKey(2, 1), EncodeTfRoles(Nproc(2)), absl::Seconds(5));
  c.Set(keys::TfAddressesKey(2, 1), R"(["b:1"])", absl::Seconds(5));
  auto bad = step(0, Nproc(2), {"a:1", "a:2"});
  EXPECT_EQ(bad.status(),
            absl::InvalidArgumentError("TF_CONFIG addresses of node rank 1 must be 2 address(es), "
                                       "one per worker (--nproc-per-node), got '[\"b:1\"]'"));
  server.Stop();
  auto gone = step(0, Nproc(2), {"a:1", "a:2"});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
}

}  // namespace
}  // namespace dgt::agent
