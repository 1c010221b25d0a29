// What a dgt-agent tells the jobs service about its node (NodeHello): hostname, addresses, GPU
// count and RDMA devices. The sources are parameters (a /dev directory, a VerbsApi) so tests
// pass fakes. Thread-compatible free functions.
#ifndef DGT_DAEMON_NODE_FACTS_H_
#define DGT_DAEMON_NODE_FACTS_H_

#include <string>
#include <vector>

#include "dgt/worker/net_discovery.h"

namespace dgt::daemon {

// gethostname(); "" when it fails.
std::string Hostname();

// NVIDIA GPUs: the number of /dev/nvidia<N> device files under `dev_dir` (the driver creates
// one per GPU; nvidiactl, nvidia-uvm and the rest are not counted). No driver: 0.
int CountGpus(const std::string& dev_dir);

// `advertise_address` first (when not empty), then every up, non-loopback IPv4 address and
// global IPv6 address of the node's interfaces (getifaddrs), without repeats.
std::vector<std::string> NodeAddresses(const std::string& advertise_address);

// Device names (e.g. "mlx5_0") from net discovery's device table (agent's NCCL_IB_HCA source);
// none when the table cannot be read.
std::vector<std::string> RdmaDevices(worker::VerbsApi& verbs);

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_NODE_FACTS_H_
