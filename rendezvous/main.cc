// dgt-rendezvous: the standalone rendezvous service. Agents (dgt-run, dgt-agent) join runs here.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/service.h"

int main(int argc, char** argv) {
  // Block the stop signals before any gRPC thread starts, so only sigwait() below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  dgt::InitLogging();
  const CLI::Validator Positive(
      [](std::string& v) {
        double d = 0;
        return CLI::detail::lexical_cast(v, d) && d > 0
                   ? std::string()
                   : "must be a number of seconds > 0, got '" + v + "'";
      },
      "SECONDS>0");
  // A whole number in [0, kMaxCount] (CLI11's own range check prints doubles). CLI11 puts the
  // flag's name in front of the message.
  constexpr int64_t kMaxCount = 1000000;
  const CLI::Validator Count(
      [](std::string& v) {
        int64_t n = 0;
        if (absl::SimpleAtoi(v, &n) && n >= 0 && n <= kMaxCount) return std::string();
        return absl::StrCat("must be an integer from 0 to ", kMaxCount, ", got '", v, "'");
      },
      absl::StrCat("INT in [0, ", kMaxCount, "]"));
  CLI::App app{"dgt-rendezvous: elastic rendezvous service for dgt agents", "dgt-rendezvous"};
  dgt::rendezvous::RendezvousServerOptions options;
  options.listen = "127.0.0.1:29400";
  double last_call_timeout = 30;
  double join_timeout = 600;
  std::string token_file;
  app.add_option("--listen", options.listen,
                 "HOST:PORT to serve on ([v6]:port for IPv6; port 0 = free)")
      ->capture_default_str();
  app.add_option("--last-call-timeout,--last_call_timeout", last_call_timeout,
                 "Default seconds to wait for more nodes once MIN joined")
      ->capture_default_str()
      ->check(Positive);
  app.add_option("--join-timeout,--join_timeout", join_timeout,
                 "Default seconds a run may stay below MIN nodes after losing nodes")
      ->capture_default_str()
      ->check(Positive);
  app.add_option("--keepalive-time-ms", options.keepalive.keepalive_time_ms,
                 "gRPC keepalive ping interval")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  app.add_option("--keepalive-timeout-ms", options.keepalive.keepalive_timeout_ms,
                 "A peer silent this long after a ping is dead")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  app.add_option("--tls-cert", options.tls.cert_file, "PEM server certificate (turns TLS on)");
  app.add_option("--tls-key", options.tls.key_file, "PEM server private key");
  app.add_option("--tls-client-ca", options.tls.ca_file,
                 "PEM CA for client certificates (mutual TLS)");
  app.add_option("--token-file", token_file, "File holding a bearer token every RPC must carry");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "HOST:PORT for Prometheus metrics over HTTP (GET /metrics)");
  app.add_option("--max-sessions-per-peer,--max_sessions_per_peer", options.max_sessions_per_peer,
                 "Open agent sessions allowed from one IP address (0 = no limit)")
      ->capture_default_str()
      ->check(Count);
  app.add_option("--max-waiting-nodes-per-run,--max_waiting_nodes_per_run",
                 options.rounds.max_waiting_nodes_per_run,
                 "Nodes a run may hold beyond its MAX (waiting spares)")
      ->capture_default_str()
      ->check(Count);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dgt-rendezvous: error: %s\n", e.what());
    return 2;
  }

  options.rounds.default_last_call_timeout = absl::Seconds(last_call_timeout);
  options.rounds.default_join_timeout = absl::Seconds(join_timeout);
  if (!token_file.empty()) {
    auto token = dgt::rendezvous::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::fprintf(stderr, "dgt-rendezvous: error: %s\n",
                   std::string(token.status().message()).c_str());
      return 2;
    }
    options.token = *token;
  }
  auto server = dgt::rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "dgt-rendezvous: error: %s\n",
                 std::string(server.status().message()).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
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
