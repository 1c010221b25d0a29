// dgt-agent: the node daemon. Registers this node with the jobs service of dgt-rendezvous and
// runs the jobs it is given with dgt-run (daemon/daemon.h). Run by systemd (Type=notify,
// deploy/dgt-agent.service.in); docs/OPERATIONS.md "dgt-agent" describes the config file.
#include <signal.h>
#include <sys/prctl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/version.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/node_facts.h"
#include "dgt/worker/net_discovery.h"
#include "rendezvous/credentials.h"
#include "replica/exit_code.h"

extern char** environ;

namespace {

// docs/EXIT_CODES.md: 2 is a usage error.
using ::dgt::replica::kExitUsage;

std::string DefaultDgtRun() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (self.parent_path() / "dgt-run").string();
}

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "dgt-agent: the dgt node daemon. Registers this node with the jobs service of "
      "dgt-rendezvous (dgt.jobs.v1) and runs the jobs submitted with `dgt submit` through "
      "dgt-run, as the configured unprivileged user. Meant to run under systemd "
      "(Type=notify): READY once registered, STATUS lines, WATCHDOG pings. SIGTERM drains "
      "(running jobs are stopped within stop_grace_s, then the node deregisters); SIGHUP "
      "reloads labels and rendezvous_endpoints from the config file.",
      "dgt-agent");
  std::string config_path = "/etc/dgt/agent.yaml";
  bool check = false;
  app.add_option("--config", config_path, "The YAML config file (keys: docs/OPERATIONS.md)")
      ->capture_default_str();
  app.add_flag("--check", check, "Validate the config file and exit: 0 when valid, 2 when not");
  app.set_version_flag("--version", std::string("dgt-agent ") + dgt::kVersion);
  app.footer(
      "Exit status: 0 after a drain (SIGTERM) or a valid --check; 2 for a bad command line or "
      "config file (the message names the file, key and value); 1 for any other failure.");
  // Usage errors as dgt-run's: "dgt-agent: error: <what> (see dgt-agent --help)".
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("dgt-agent: error: ") + e.what() + " (see dgt-agent --help)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  dgt::InitLogging();

  const dgt::daemon::ConfigDefaults defaults{dgt::daemon::Hostname(), DefaultDgtRun()};
  auto config = dgt::daemon::LoadAgentConfig(config_path, defaults);
  if (!config.ok()) {
    std::fprintf(stderr, "dgt-agent: error: %s\n", std::string(config.status().message()).c_str());
    return kExitUsage;
  }
  if (check) {
    std::printf("%s: OK (node %s, %zu endpoint(s), jobs as %s in %s)\n", config_path.c_str(),
                config->node_name.c_str(), config->rendezvous_endpoints.size(),
                config->run_as_user.c_str(), config->work_dir.c_str());
    return 0;
  }

  // Signals are taken by one thread with sigwait; blocked everywhere else (threads inherit the
  // mask; job processes get an empty one before exec).
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Orphaned job processes come back to this process to be reaped (and killed by a cancel).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  dgt::rendezvous::RouteGrpcLogsToDebug();

  dgt::daemon::DaemonEnv env;
  env.hostname = defaults.hostname;
  env.environ = Environment();
  env.notify = [](const std::string& state) { sd_notify(0, state.c_str()); };
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && config->watchdog.value_or(true)) {
    env.watchdog_interval = absl::Microseconds(watchdog_usec / 2);
  }
  dgt::worker::RealVerbsApi verbs;
  env.verbs = &verbs;
  env.reload = [config_path, defaults] {
    return dgt::daemon::LoadAgentConfig(config_path, defaults);
  };
  dgt::daemon::Daemon daemon(*config, std::move(env));
  std::thread signal_thread([&daemon, signals] {
    for (;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      if (sig == SIGHUP) {
        daemon.RequestReload();
      } else {
        daemon.RequestStop();
      }
    }
  });
  signal_thread.detach();
  spdlog::info("dgt-agent {} starting: node {}, jobs as {} in {}", dgt::kVersion, config->node_name,
               config->run_as_user, config->work_dir);
  const int rc = daemon.Run();
  sd_notify(0, "STOPPING=1");
  std::fflush(nullptr);
  std::_Exit(rc);  // The signal thread is still in sigwait.
}
