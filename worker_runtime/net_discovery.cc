#include "dgt/worker/net_discovery.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dgt::worker {

std::string PortStateName(int state) {
  switch (state) {
    case 1:
      return "DOWN";
    case 2:
      return "INIT";
    case 3:
      return "ARMED";
    case 4:
      return "ACTIVE";
    case 5:
      return "ACTIVE_DEFER";
    default:
      return absl::StrCat("state ", state);
  }
}

std::string LinkLayerName(int link_layer) {
  switch (link_layer) {
    case 0:
      return "unspecified";
    case kLinkLayerInfiniBand:
      return "InfiniBand";
    case kLinkLayerEthernet:
      return "Ethernet";
    default:
      return absl::StrCat("link layer ", link_layer);
  }
}

absl::StatusOr<std::string> RealRouteApi::InterfaceTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res); rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  // A connected UDP socket makes the kernel pick the route and source address; nothing is sent.
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0;
  int err = errno;
  if (fd >= 0) ::close(fd);
  const int family = res->ai_family;
  ::freeaddrinfo(res);
  if (!ok) {
    return absl::NotFoundError(absl::StrCat("no route to '", host, "': ", std::strerror(err)));
  }
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) {
    return absl::NotFoundError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::string name;
  for (ifaddrs* i = ifs; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      auto* b = reinterpret_cast<sockaddr_in*>(&local);
      if (a->sin_addr.s_addr == b->sin_addr.s_addr) name = i->ifa_name;
    } else if (family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      auto* b = reinterpret_cast<sockaddr_in6*>(&local);
      if (std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0) name = i->ifa_name;
    }
  }
  ::freeifaddrs(ifs);
  if (name.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no interface holds the source address used to reach '", host, "'"));
  }
  return name;
}

NetworkReport DeriveNetworkEnv(VerbsApi& verbs, RouteApi& route, const NetworkEnvOptions& options) {
  NetworkReport report;
  auto getenv =
      options.getenv ? options.getenv : [](const char* n) -> const char* { return std::getenv(n); };
  auto user_set = [&](const char* name) {
    const char* v = getenv(name);
    return v != nullptr && *v != '\0';
  };

  auto devices = verbs.ListDevices();
  if (!devices.ok()) {
    report.reasons.push_back(
        absl::StrCat("InfiniBand: device list unavailable (", devices.status().message(), ")"));
  } else {
    report.devices = *devices;
    if (devices->empty()) report.reasons.emplace_back("InfiniBand: no RDMA devices found");
  }
  for (const IbDevice& d : report.devices) {
    for (const IbPort& p : d.ports) {
      const std::string id = absl::StrCat(d.name, ":", p.number);
      if (p.state != kPortActive) {
        report.reasons.push_back(
            absl::StrCat(id, " skipped: port state ", PortStateName(p.state), ", not ACTIVE"));
        continue;
      }
      if (p.link_layer == kLinkLayerEthernet) {
        if (!options.include_roce) {
          report.reasons.push_back(absl::StrCat(
              id, " skipped: link layer Ethernet with LID ", p.lid,
              " (not InfiniBand; e.g. Azure's accelerated-networking NIC; RoCE not enabled)"));
          continue;
        }
        if (p.gids.empty()) {
          report.reasons.push_back(
              absl::StrCat(id, " skipped: link layer Ethernet (RoCE) without any GID"));
          continue;
        }
        report.reasons.push_back(
            absl::StrCat(id, " usable: RoCE, ACTIVE, ", p.gids.size(), " GID(s)"));
        report.usable_ports.push_back(id);
        continue;
      }
      if (p.link_layer != kLinkLayerInfiniBand) {
        report.reasons.push_back(
            absl::StrCat(id, " skipped: link layer ", LinkLayerName(p.link_layer)));
        continue;
      }
      if (p.lid == 0) {
        report.reasons.push_back(
            absl::StrCat(id, " skipped: InfiniBand port with LID 0 (no subnet manager?)"));
        continue;
      }
      report.reasons.push_back(absl::StrCat(id, " usable: InfiniBand, ACTIVE, LID ", p.lid));
      report.usable_ports.push_back(id);
    }
  }

  const bool ib_disabled_by_user =
      user_set("NCCL_IB_DISABLE") && std::string(getenv("NCCL_IB_DISABLE")) != "0";
  if (user_set("NCCL_IB_HCA")) {
    report.reasons.push_back(
        absl::StrCat("NCCL_IB_HCA kept as the user set it: ", getenv("NCCL_IB_HCA")));
  } else if (ib_disabled_by_user) {
    report.reasons.emplace_back("NCCL_IB_HCA not set: the user set NCCL_IB_DISABLE");
  } else if (!report.usable_ports.empty()) {
    report.env["NCCL_IB_HCA"] = absl::StrCat("=", absl::StrJoin(report.usable_ports, ","));
  }
  if (user_set("NCCL_IB_DISABLE")) {
    report.reasons.push_back(
        absl::StrCat("NCCL_IB_DISABLE kept as the user set it: ", getenv("NCCL_IB_DISABLE")));
  } else if (report.usable_ports.empty()) {
    // A std::string, not "1": gcc 12 at -O3 (CMAKE_BUILD_TYPE=Release) reports a false
    // -Wrestrict overlap in std::string::operator=(const char*) here (GCC bug 105329).
    report.env["NCCL_IB_DISABLE"] = std::string("1");
    report.reasons.emplace_back("NCCL_IB_DISABLE=1: no usable InfiniBand port");
  }

  if (!options.master_addr.empty()) {
    auto ifname = route.InterfaceTo(options.master_addr);
    if (ifname.ok()) {
      report.socket_ifname = *ifname;
      report.reasons.push_back(
          absl::StrCat("interface ", *ifname, " routes to MASTER_ADDR ", options.master_addr));
    } else {
      report.reasons.push_back(absl::StrCat("no interface for MASTER_ADDR ", options.master_addr,
                                            ": ", ifname.status().message()));
    }
  }
  if (user_set("NCCL_SOCKET_IFNAME")) {
    report.reasons.push_back(
        absl::StrCat("NCCL_SOCKET_IFNAME kept as the user set it: ", getenv("NCCL_SOCKET_IFNAME")));
  } else if (!report.socket_ifname.empty()) {
    report.env["NCCL_SOCKET_IFNAME"] = absl::StrCat("=", report.socket_ifname);
  }
  return report;
}

}  // namespace dgt::worker
