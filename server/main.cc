// dgt-rendezvous: the standalone rendezvous service. Agents (dgt-run, dgt-agent) join runs here;
// node daemons and `dgt` use its jobs service. The flags and the wiring are the server layer's
// (server/flags.h, server/server.h).
#include <csignal>
#include <cstdio>

#include "common/logging.h"
#include "server/flags.h"
#include "server/server.h"

int main(int argc, char** argv) {
  // Block the stop signals before any gRPC thread starts, so only sigwait() below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  dgt::InitLogging();
  dgt::server::ParsedFlags flags = dgt::server::ParseFlags(argc, argv);
  if (flags.exit_code.has_value()) return *flags.exit_code;
  auto server = dgt::server::Server::Start(std::move(flags.options));
  if (!server.ok()) {
    dgt::server::PrintError(server.status());
    return dgt::server::ExitCodeFor(server.status());
  }
  // Print the bound ports on stdout, parseable by scripts that asked for port 0.
  std::printf("dgt-rendezvous listening on port %d\n", (*server)->port());
  if ((*server)->metrics_port() != 0) {
    std::printf("dgt-rendezvous metrics on port %d\n", (*server)->metrics_port());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("dgt-rendezvous: signal {}, shutting down", sig);
  (*server)->Shutdown();
  return 0;
}
