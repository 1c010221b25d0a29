#include "cli/doctor_command.h"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_join.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::cli {
namespace {

struct DoctorFlags {
  std::string master_addr;
  bool include_roce = false;
};

int RunDoctor(const DoctorFlags& f) {
  worker::RealVerbsApi verbs;
  worker::RealRouteApi route;
  worker::NetworkEnvOptions options;
  options.master_addr = f.master_addr;
  if (options.master_addr.empty()) {
    const char* env = std::getenv("MASTER_ADDR");
    options.master_addr = env != nullptr && *env != '\0' ? env : "127.0.0.1";
  }
  options.include_roce = f.include_roce;
  worker::NetworkReport r = worker::DeriveNetworkEnv(verbs, route, options);

  std::cout << "RDMA devices: " << r.devices.size() << "\n";
  for (const worker::IbDevice& d : r.devices) {
    for (const worker::IbPort& p : d.ports) {
      std::cout << "  " << d.name << ":" << p.number << "  state=" << worker::PortStateName(p.state)
                << " link_layer=" << worker::LinkLayerName(p.link_layer) << " lid=" << p.lid
                << " gids=" << (p.gids.empty() ? "-" : absl::StrJoin(p.gids, ",")) << "\n";
    }
  }
  std::cout << "MASTER_ADDR " << options.master_addr
            << " via interface: " << (r.socket_ifname.empty() ? "(unknown)" : r.socket_ifname)
            << "\n";
  std::cout << "Decisions:\n";
  for (const std::string& why : r.reasons) std::cout << "  " << why << "\n";
  std::cout << "Environment dgt exports to workers:\n";
  if (r.env.empty()) std::cout << "  (nothing)\n";
  for (const auto& [k, v] : r.env) std::cout << "  " << k << "=" << v << "\n";
  return 0;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, std::function<int()>* run) {
  auto flags = std::make_shared<DoctorFlags>();
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Print RDMA devices, the route to the store and the NCCL variables dgt derives");
  doctor->add_option("--master-addr", flags->master_addr,
                     "Store address to find the routing interface for (default $MASTER_ADDR, "
                     "else 127.0.0.1)");
  doctor->add_flag("--include-roce", flags->include_roce,
                   "Count RoCE (Ethernet link layer) ports with GIDs as usable");
  doctor->callback([flags, run] { *run = [flags] { return RunDoctor(*flags); }; });
}

}  // namespace dgt::cli
