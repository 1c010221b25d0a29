#include "dgt/worker/net_discovery.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::worker {
namespace {

class FakeVerbsApi final : public VerbsApi {
 public:
  explicit FakeVerbsApi(absl::StatusOr<std::vector<IbDevice>> table) : table_(std::move(table)) {}
  absl::StatusOr<std::vector<IbDevice>> ListDevices() override { return table_; }

 private:
  absl::StatusOr<std::vector<IbDevice>> table_;
};

class FakeRouteApi final : public RouteApi {
 public:
  explicit FakeRouteApi(std::map<std::string, std::string> routes) : routes_(std::move(routes)) {}
  absl::StatusOr<std::string> InterfaceTo(const std::string& host) override {
    auto it = routes_.find(host);
    if (it == routes_.end()) return absl::NotFoundError("no route to '" + host + "'");
    return it->second;
  }

 private:
  std::map<std::string, std::string> routes_;
};

IbPort Port(int number, int state, int link_layer, uint16_t lid,
            std::vector<std::string> gids = {}) {
  IbPort p;
  p.number = number;
  p.state = state;
  p.link_layer = link_layer;
  p.lid = lid;
  p.gids = std::move(gids);
  return p;
}

IbDevice Dev(std::string name, std::vector<IbPort> ports) {
  return IbDevice{std::move(name), std::move(ports)};
}

// An Azure ND-series VM: 2 IB HCAs and the accelerated-networking NIC.
std::vector<IbDevice> AzureTable() {
  return {Dev("mlx5_an0", {Port(1, kPortActive, kLinkLayerEthernet, 0, {"fe80::1"})}),
          Dev("mlx5_ib0", {Port(1, kPortActive, kLinkLayerInfiniBand, 12)}),
          Dev("mlx5_ib1", {Port(1, kPortActive, kLinkLayerInfiniBand, 13)})};
}

NetworkEnvOptions Options(std::map<std::string, std::string> user_env = {},
                          std::string master = "10.0.0.4") {
  auto env = std::make_shared<std::map<std::string, std::string>>(std::move(user_env));
  NetworkEnvOptions o;
  o.master_addr = std::move(master);
  o.getenv = [env](const char* n) -> const char* {
    auto it = env->find(n);
    return it == env->end() ? nullptr : it->second.c_str();
  };
  return o;
}

FakeRouteApi EthRoute() { return FakeRouteApi({{"10.0.0.4", "eth0"}, {"127.0.0.1", "lo"}}); }

TEST(NetDiscoveryTest, AzureIbNodeUsesIbHcasAndSkipsTheAcceleratedNic) {
  FakeVerbsApi verbs(AzureTable());
  FakeRouteApi route = EthRoute();
  NetworkReport r = DeriveNetworkEnv(verbs, route, Options());
  EXPECT_EQ(r.usable_ports, (std::vector<std::string>{"mlx5_ib0:1", "mlx5_ib1:1"}));
  EXPECT_EQ(r.env, (std::map<std::string, std::string>{{"NCCL_IB_HCA", "=mlx5_ib0:1,mlx5_ib1:1"},
                                                       {"NCCL_SOCKET_IFNAME", "=eth0"}}));
  EXPECT_EQ(r.reasons.at(0),
            "mlx5_an0:1 skipped: link layer Ethernet with LID 0 (not InfiniBand; e.g. Azure's "
            "accelerated-networking NIC; RoCE not enabled)");
  EXPECT_EQ(r.reasons.at(1), "mlx5_ib0:1 usable: InfiniBand, ACTIVE, LID 12");
}

TEST(NetDiscoveryTest, DownAndInitPortsAreSkipped) {
  FakeVerbsApi verbs(std::vector<IbDevice>{
      Dev("mlx5_0",
          {Port(1, 1, kLinkLayerInfiniBand, 0), Port(2, kPortActive, kLinkLayerInfiniBand, 7)}),
      Dev("mlx5_1", {Port(1, 2, kLinkLayerInfiniBand, 0)})});
  FakeRouteApi route = EthRoute();
  NetworkReport r = DeriveNetworkEnv(verbs, route, Options());
  EXPECT_EQ(r.env.at("NCCL_IB_HCA"), "=mlx5_0:2");
  EXPECT_EQ(r.env.count("NCCL_IB_DISABLE"), 0u);
  EXPECT_EQ(r.reasons.at(0), "mlx5_0:1 skipped: port state DOWN, not ACTIVE");
  EXPECT_EQ(r.reasons.at(2), "mlx5_1:1 skipped: port state INIT, not ACTIVE");
}

TEST(NetDiscoveryTest, AllPortsDownDisablesIb) {
  FakeVerbsApi verbs(std::vector<IbDevice>{Dev("mlx5_ib0", {Port(1, 1, 1, 0)})});
  FakeRouteApi route = EthRoute();
  NetworkReport r = DeriveNetworkEnv(verbs, route, Options());
  EXPECT_TRUE(r.usable_ports.empty());
  EXPECT_EQ(r.env, (std::map<std::string, std::string>{{"NCCL_IB_DISABLE", "1"},
                                                       {"NCCL_SOCKET_IFNAME", "=eth0"}}));
}

TEST(NetDiscoveryTest, RoceIsSkippedByDefaultAndUsedWhenEnabled) {
  std::vector<IbDevice> table = {Dev("mlx5_0", {Port(1, kPortActive, kLinkLayerEthernet, 0,
                                                     {"fe80:0000:0000:0000:0000:0000:0000:0001"})}),
                                 Dev("mlx5_1", {Port(1, kPortActive, kLinkLayerEthernet, 0)})};
  FakeVerbsApi verbs(table);
  FakeRouteApi route = EthRoute();
  NetworkReport off = DeriveNetworkEnv(verbs, route, Options());
  EXPECT_EQ(off.env.at("NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(off.env.count("NCCL_IB_HCA"), 0u);

  NetworkEnvOptions o = Options();
  o.include_roce = true;
  NetworkReport on = DeriveNetworkEnv(verbs, route, o);
  EXPECT_EQ(on.env.at("NCCL_IB_HCA"), "=mlx5_0:1");
  EXPECT_EQ(on.env.count("NCCL_IB_DISABLE"), 0u);
  EXPECT_EQ(on.reasons.at(0), "mlx5_0:1 usable: RoCE, ACTIVE, 1 GID(s)");
  EXPECT_EQ(on.reasons.at(1), "mlx5_1:1 skipped: link layer Ethernet (RoCE) without any GID");
}

TEST(NetDiscoveryTest, UserSetVariablesAreNeverOverridden) {
  FakeVerbsApi verbs(AzureTable());
  FakeRouteApi route = EthRoute();
  NetworkReport r = DeriveNetworkEnv(
      verbs, route, Options({{"NCCL_IB_HCA", "mlx5_ib1"}, {"NCCL_SOCKET_IFNAME", "ib0"}}));
  EXPECT_TRUE(r.env.empty()) << r.env.begin()->first;
  EXPECT_EQ(r.usable_ports.size(), 2u);

  // The user disabled IB: no HCA list, no second NCCL_IB_DISABLE.
  NetworkReport d = DeriveNetworkEnv(verbs, route, Options({{"NCCL_IB_DISABLE", "1"}}));
  EXPECT_EQ(d.env, (std::map<std::string, std::string>{{"NCCL_SOCKET_IFNAME", "=eth0"}}));
}

TEST(NetDiscoveryTest, NoDevicesAndNoRoute) {
  FakeVerbsApi verbs(std::vector<IbDevice>{});
  FakeRouteApi route({});
  NetworkReport r = DeriveNetworkEnv(verbs, route, Options({}, "10.9.9.9"));
  EXPECT_EQ(r.env, (std::map<std::string, std::string>{{"NCCL_IB_DISABLE", "1"}}));
  EXPECT_EQ(r.reasons.at(0), "InfiniBand: no RDMA devices found");
  EXPECT_EQ(r.reasons.back(), "no interface for MASTER_ADDR 10.9.9.9: no route to '10.9.9.9'");
}

TEST(NetDiscoveryTest, LibraryErrorCountsAsNoDevices) {
  FakeVerbsApi verbs(absl::UnavailableError("ibv_get_device_list failed: EPERM"));
  FakeRouteApi route = EthRoute();
  NetworkReport r = DeriveNetworkEnv(verbs, route, Options());
  EXPECT_EQ(r.env.at("NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(r.reasons.at(0),
            "InfiniBand: device list unavailable (ibv_get_device_list failed: EPERM)");
}

// The real rdma-core library: this machine has no RDMA devices; it must answer, not crash.
TEST(NetDiscoveryTest, RealLibraryAnswers) {
  RealVerbsApi verbs;
  auto devices = verbs.ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (const IbDevice& d : *devices) EXPECT_FALSE(d.name.empty());
}

TEST(NetDiscoveryTest, RealRouteToLoopbackIsLo) {
  RealRouteApi route;
  auto name = route.InterfaceTo("127.0.0.1");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "lo");
  EXPECT_EQ(route.InterfaceTo("no-such-host.invalid").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgt::worker
