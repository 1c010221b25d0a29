// RealVerbsApi: the only file that includes rdma-core's headers.
#include <infiniband/verbs.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::worker {
namespace {

// GID tables can hold hundreds of entries (RoCE); the first few name the port well enough.
constexpr int kMaxGids = 16;

std::string FormatGid(const ibv_gid& gid) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    if (i > 0) out += ':';
    out += absl::StrFormat("%02x%02x", gid.raw[i], gid.raw[i + 1]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<IbDevice>> RealVerbsApi::ListDevices() {
  std::vector<IbDevice> out;
  int n = 0;
  ibv_device** list = ::ibv_get_device_list(&n);
  if (list == nullptr) {
    // ENOSYS: no kernel support; that is "zero devices" for our purposes.
    if (errno == ENOSYS) return out;
    return absl::UnavailableError(
        absl::StrCat("ibv_get_device_list failed: ", std::strerror(errno)));
  }
  for (int i = 0; i < n; ++i) {
    IbDevice dev;
    dev.name = ::ibv_get_device_name(list[i]);
    ibv_context* ctx = ::ibv_open_device(list[i]);
    if (ctx == nullptr) {
      spdlog::warn("ib: cannot open {}: {}", dev.name, std::strerror(errno));
      continue;
    }
    ibv_device_attr attr{};
    if (::ibv_query_device(ctx, &attr) != 0) {
      spdlog::warn("ib: ibv_query_device({}) failed", dev.name);
      ::ibv_close_device(ctx);
      continue;
    }
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pattr{};
      if (::ibv_query_port(ctx, static_cast<uint8_t>(p), &pattr) != 0) {
        spdlog::warn("ib: ibv_query_port({}, {}) failed", dev.name, p);
        continue;
      }
      IbPort port;
      port.number = p;
      port.state = pattr.state;
      port.link_layer = pattr.link_layer;
      port.lid = pattr.lid;
      for (int g = 0; g < pattr.gid_tbl_len && g < kMaxGids; ++g) {
        ibv_gid gid{};
        if (::ibv_query_gid(ctx, static_cast<uint8_t>(p), g, &gid) != 0) break;
        static const ibv_gid kZero{};
        if (std::memcmp(&gid, &kZero, sizeof(gid)) == 0) continue;
        port.gids.push_back(FormatGid(gid));
      }
      dev.ports.push_back(std::move(port));
    }
    ::ibv_close_device(ctx);
    out.push_back(std::move(dev));
  }
  ::ibv_free_device_list(list);
  return out;
}

}  // namespace dgt::worker
