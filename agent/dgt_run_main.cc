// dgt-run: torchrun-compatible launcher. Parses flags and hands them to the Agent.
#include <cstdio>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_log.h"
#include "agent/flags/launch_options.h"
#include "common/logging.h"
#include "rendezvous/credentials.h"

int main(int argc, char** argv) {
  dgt::InitLogging();
  // Connection failures are reported in one line of ours (agent/coord/connect_failure.h), not as
  // gRPC's handshake errors once per reconnect.
  dgt::rendezvous::RouteGrpcLogsToDebug();
  std::vector<std::string> args(argv + 1, argv + argc);
  dgt::agent::ParsedCommandLine parsed = dgt::agent::ParseDgtRunCommandLine(args);
  if (!parsed.options) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  dgt::agent::ConfigureAgentLog(parsed.options->log_format);
  for (const std::string& w : parsed.options->warnings) spdlog::warn("dgt-run: {}", w);
  if (!parsed.options->setting_sources.empty()) {
    spdlog::info("dgt-run: settings: {}", parsed.options->setting_sources);
  }
  dgt::agent::Agent agent(std::move(*parsed.options));
  return agent.Run();
}
