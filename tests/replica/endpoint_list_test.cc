#include "replica/endpoint_list.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace dgt::replica {
namespace {

// --rdzv-endpoint a:29400,b:29400: the replicas of one service, in the given order.
TEST(ParseEndpointListTest, ItemsInOrder) {
  auto list = ParseEndpointList("a:29400, b ,[::1]:7", 29400, "--rdzv-endpoint");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].host, "a");
  EXPECT_EQ((*list)[0].port, 29400);
  EXPECT_EQ((*list)[1].host, "b");
  EXPECT_EQ((*list)[1].port, 29400);  // The default port.
  EXPECT_EQ((*list)[2].host, "::1");
  EXPECT_EQ((*list)[2].port, 7);
  auto one = ParseEndpointList("node-0:1234", -1, "x");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].host, "node-0");
  EXPECT_EQ((*one)[0].port, 1234);
}

TEST(ParseEndpointListTest, ErrorsNameTheFlagAndTheItem) {
  EXPECT_EQ(ParseEndpointList("a:29400,b:x", 29400, "--rdzv-endpoint").status().message(),
            "--rdzv-endpoint: port must be 1..65535, got 'b:x' (item 2 of 'a:29400,b:x')");
  EXPECT_EQ(ParseEndpointList("a:29400,,b:29400", 29400, "--rdzv-endpoint").status().message(),
            "--rdzv-endpoint: empty item 2 in 'a:29400,,b:29400'");
  EXPECT_EQ(ParseEndpointList("a:1,", 29400, "x").status().message(), "x: empty item 2 in 'a:1,'");
  EXPECT_EQ(ParseEndpointList("a:0,b:1", 29400, "x").status().message(),
            "x: port must be 1..65535, got 'a:0' (item 1 of 'a:0,b:1')");
  // One item: as ParseHostPort, without the list.
  EXPECT_EQ(ParseEndpointList("h:99999", 1, "x").status().message(),
            "x: port must be 1..65535, got 'h:99999'");
  EXPECT_EQ(ParseEndpointList("", 1, "x").status().message(), "x: expected host[:port], got ''");
  EXPECT_EQ(ParseEndpointList("a:1,b", 1, "x").status().code(), absl::StatusCode::kOk);
}

TEST(ParseEndpointListTest, DuplicatesAreRefused) {
  // Same host (any case) and port once the default port is applied.
  EXPECT_EQ(ParseEndpointList("a:29400,b,A", 29400, "--rdzv-endpoint").status().message(),
            "--rdzv-endpoint: 'A:29400' is listed twice in 'a:29400,b,A'");
  EXPECT_EQ(ParseEndpointList("[::1]:5,[::1]:5", 29400, "x").status().message(),
            "x: '[::1]:5' is listed twice in '[::1]:5,[::1]:5'");
  EXPECT_TRUE(ParseEndpointList("a:1,a:2", 29400, "x").ok());  // Two ports of one host.
}

// A resolver from a table: names not in it do not resolve.
Resolver Table(std::map<std::string, std::string> table) {
  return [table](absl::string_view host) -> absl::StatusOr<std::string> {
    auto it = table.find(std::string(host));
    if (it == table.end()) return absl::UnavailableError("cannot resolve");
    return it->second;
  };
}

TEST(FindSameReplicaTest, NamesThatResolveToOneAddress) {
  const Resolver resolve =
      Table({{"localhost", "127.0.0.1"}, {"127.0.0.1", "127.0.0.1"}, {"b", "10.0.0.2"}});
  auto list = ParseEndpointList("b:1,localhost:1,127.0.0.1:1", -1, "x");
  ASSERT_TRUE(list.ok()) << list.status();
  const std::optional<SameReplica> same = FindSameReplica(*list, resolve);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->first, 1u);
  EXPECT_EQ(same->second, 2u);
  EXPECT_EQ(same->address, "127.0.0.1:1");
  // Other ports, names that do not resolve, and one item are never the same replica.
  list = ParseEndpointList("localhost:1,127.0.0.1:2,nowhere:1", -1, "x");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_FALSE(FindSameReplica(*list, resolve).has_value());
  int calls = 0;
  const Resolver counting = [&](absl::string_view) -> absl::StatusOr<std::string> {
    ++calls;
    return std::string("10.0.0.1");
  };
  list = ParseEndpointList("a:1", -1, "x");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_FALSE(FindSameReplica(*list, counting).has_value());
  EXPECT_EQ(calls, 0);
}

TEST(SameEndpointTest, SameHostAnyCaseOrSameAddress) {
  const Resolver resolve = Table({{"node-b", "10.0.0.2"}, {"10.0.0.2", "10.0.0.2"}});
  EXPECT_TRUE(SameEndpoint("Node-A:29400", "node-a:29400", resolve));
  EXPECT_TRUE(SameEndpoint("node-b:29400", "10.0.0.2:29400", resolve));
  EXPECT_FALSE(SameEndpoint("node-b:29400", "10.0.0.2:29401", resolve));
  EXPECT_FALSE(SameEndpoint("node-c:29400", "10.0.0.2:29400", resolve));  // Does not resolve.
  EXPECT_FALSE(SameEndpoint("node-b", "node-b:29400", resolve));          // No port: no parse.
}

TEST(LeaderIndexTest, TheListedLeaderThatIsNotTheStandby) {
  const Resolver resolve = Table({{"b", "10.0.0.2"}, {"10.0.0.2", "10.0.0.2"}});
  const std::vector<std::string> eps = {"a:1", "b:1", "c:1"};
  EXPECT_EQ(LeaderIndex(eps, "a:1", "c:1", resolve), std::optional<size_t>(2));
  EXPECT_EQ(LeaderIndex(eps, "a:1", "10.0.0.2:1", resolve), std::optional<size_t>(1));
  EXPECT_EQ(LeaderIndex(eps, "a:1", "", resolve), std::nullopt);     // No leader now.
  EXPECT_EQ(LeaderIndex(eps, "a:1", "a:1", resolve), std::nullopt);  // Itself.
  EXPECT_EQ(LeaderIndex(eps, "a:1", "d:1", resolve), std::nullopt);  // Not listed.
  EXPECT_EQ(LeaderIndex(eps, "a:1", "c:2", resolve), std::nullopt);  // Another port.
}

}  // namespace
}  // namespace dgt::replica
