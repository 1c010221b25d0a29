// Network discovery for NCCL: which InfiniBand HCAs and ports a node can use, and which
// interface routes to the job's store, turned into the NCCL_* variables that make NCCL pick them.
//
// The facts come through two seams so the decisions are testable without hardware:
//   VerbsApi  — the device table rdma-core reports (RealVerbsApi calls libibverbs);
//   RouteApi  — the interface the kernel routes a destination through (RealRouteApi asks the
//               kernel with a connected UDP socket, which sends nothing, plus getifaddrs).
// DeriveNetworkEnv() holds every decision; the agent calls it to export the variables to all its
// workers (PyTorch ones included), and `dgt doctor` prints its report.
//
// Thread-safety: the free functions are thread-safe; the Real* seams hold no state.
#ifndef DGT_WORKER_NET_DISCOVERY_H_
#define DGT_WORKER_NET_DISCOVERY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dgt::worker {

// Values as rdma-core defines them (<infiniband/verbs.h>), so fakes need not include it.
inline constexpr int kPortActive = 4;           // IBV_PORT_ACTIVE
inline constexpr int kLinkLayerInfiniBand = 1;  // IBV_LINK_LAYER_INFINIBAND
inline constexpr int kLinkLayerEthernet = 2;    // IBV_LINK_LAYER_ETHERNET

struct IbPort {
  int number = 1;                 // 1-based port number.
  int state = 0;                  // ibv_port_state: 4 = ACTIVE.
  int link_layer = 0;             // 1 = InfiniBand, 2 = Ethernet (RoCE).
  uint16_t lid = 0;               // Local identifier; 0 on Ethernet link layers.
  std::vector<std::string> gids;  // Non-zero GIDs, "fe80:0000:...", in table order.
};

struct IbDevice {
  std::string name;  // e.g. "mlx5_ib0".
  std::vector<IbPort> ports;
};

// The device table of the node.
class VerbsApi {
 public:
  virtual ~VerbsApi() = default;
  // Every HCA with every port. Errors: Unavailable when the library cannot be used at all.
  virtual absl::StatusOr<std::vector<IbDevice>> ListDevices() = 0;
};

// ibv_get_device_list / ibv_open_device / ibv_query_device / ibv_query_port / ibv_query_gid.
// A device that fails to open or answer is left out (logged); zero devices is not an error.
class RealVerbsApi final : public VerbsApi {
 public:
  absl::StatusOr<std::vector<IbDevice>> ListDevices() override;
};

// Which local interface the kernel would use to reach a host.
class RouteApi {
 public:
  virtual ~RouteApi() = default;
  // The interface name (e.g. "eth0", "lo") routing to `host` (an IP literal or a name).
  // Errors: InvalidArgument for a name that does not resolve; NotFound when no route or no
  // interface holds the source address.
  virtual absl::StatusOr<std::string> InterfaceTo(const std::string& host) = 0;
};

class RealRouteApi final : public RouteApi {
 public:
  absl::StatusOr<std::string> InterfaceTo(const std::string& host) override;
};

struct NetworkEnvOptions {
  // Where the job's store lives (MASTER_ADDR); empty skips NCCL_SOCKET_IFNAME.
  std::string master_addr;
  // Looks up the user's environment (default std::getenv); variables it returns are never
  // overridden.
  std::function<const char*(const char*)> getenv;
  // Count Ethernet (RoCE) ports with at least one GID as usable. Off by default: on Azure the
  // accelerated-networking NIC is an mlx5 with link layer Ethernet and LID 0 that carries no
  // RDMA traffic between VMs, and a plain Ethernet port cannot be told apart from it reliably.
  bool include_roce = false;
};

// What discovery decided, and why, for `dgt doctor` and the agent's log.
struct NetworkReport {
  std::vector<IbDevice> devices;
  // Ports chosen for NCCL_IB_HCA, as "device:port".
  std::vector<std::string> usable_ports;
  std::string socket_ifname;  // Interface routing to master_addr, empty when unknown.
  // Variables to add to the workers' environment (only ones the user did not set).
  std::map<std::string, std::string> env;
  // One line per decision: "mlx5_an0:1 skipped: link layer Ethernet with LID 0 (...)".
  std::vector<std::string> reasons;
};

// Derives NCCL_IB_HCA (exact form "=mlx5_ib0:1,mlx5_ib1:1"), NCCL_SOCKET_IFNAME ("=eth0") and
// NCCL_IB_DISABLE=1 (no usable IB port). Ports not ACTIVE and Ethernet ports with LID 0 (unless
// include_roce) are skipped. A device-table error counts as zero devices (with a reason).
NetworkReport DeriveNetworkEnv(VerbsApi& verbs, RouteApi& route, const NetworkEnvOptions& options);

// Human-readable name of a port state / link layer ("ACTIVE", "DOWN", "InfiniBand", ...).
std::string PortStateName(int state);
std::string LinkLayerName(int link_layer);

}  // namespace dgt::worker

#endif  // DGT_WORKER_NET_DISCOVERY_H_
