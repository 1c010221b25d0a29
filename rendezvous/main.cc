// dgt-rendezvous: the standalone rendezvous service. Agents (dgt-run, dgt-agent) join runs here.
#include <csignal>
#include <cstdio>

#include "CLI/CLI.hpp"
#include "rendezvous/service.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  // Block the stop signals before any gRPC thread starts, so only sigwait() below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  CLI::App app{"dgt-rendezvous: elastic rendezvous service for dgt agents"};
  std::string listen = "127.0.0.1:29400";
  double last_call_timeout = 30;
  app.add_option("--listen", listen, "HOST:PORT to serve on ([v6]:port for IPv6; port 0 = free)")
      ->capture_default_str();
  app.add_option("--last-call-timeout,--last_call_timeout", last_call_timeout,
                 "Default seconds to wait for more nodes once MIN joined")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  dgt::rendezvous::RoundStateOptions options;
  options.default_last_call_timeout = absl::Seconds(last_call_timeout);
  auto server = dgt::rendezvous::RendezvousServer::Start(listen, options);
  if (!server.ok()) {
    std::fprintf(stderr, "dgt-rendezvous: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  // Print the bound port on stdout, parseable by scripts that asked for port 0.
  std::printf("dgt-rendezvous listening on port %d\n", (*server)->port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("dgt-rendezvous: signal {}, shutting down", sig);
  (*server)->Shutdown();
  return 0;
}
