#include "daemon/node_facts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/logging.h"

namespace dgt::daemon {

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

int CountGpus(const std::string& dev_dir) {
  std::error_code ec;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    int index = 0;
    if (absl::StartsWith(name, "nvidia") && name.size() > 6 &&
        absl::SimpleAtoi(absl::string_view(name).substr(6), &index) && index >= 0) {
      ++n;
    }
  }
  return n;
}

std::vector<std::string> NodeAddresses(const std::string& advertise_address) {
  std::vector<std::string> out;
  if (!advertise_address.empty()) out.push_back(advertise_address);
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const struct ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0 ||
        (it->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    if (it->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), buf) == out.end()) out.emplace_back(buf);
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::string> RdmaDevices(worker::VerbsApi& verbs) {
  std::vector<std::string> out;
  auto devices = verbs.ListDevices();
  if (!devices.ok()) {
    spdlog::info("no RDMA devices reported: {}", devices.status().ToString());
    return out;
  }
  for (const auto& d : *devices) out.push_back(d.name);
  return out;
}

}  // namespace dgt::daemon
