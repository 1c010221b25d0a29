// `dgt`: the operator's command line. Each command group registers itself here; a group sets the
// function to run when one of its commands is picked, so main stays a table of groups.
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/doctor_command.h"
#include "cli/jobs_command.h"
#include "cli/recovery_command.h"
#include "cli/status_command.h"
#include "cli/store_command.h"
#include "common/version.h"
#include "rendezvous/credentials.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

// CLI11 answers an unknown command with "A subcommand is required" (or "arguments were not
// expected"): name the command and the known ones instead. Returns the message, or "" when the
// command words name real (sub)commands.
std::string UnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = "dgt";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') return "";  // Options: CLI11 checks them.
    auto match = at->get_subcommands([&](CLI::App* sub) { return sub->check_name(arg); });
    if (match.empty()) {
      if (at->get_require_subcommand_min() == 0) return "";  // A positional argument.
      std::vector<std::string> known;
      for (CLI::App* sub : at->get_subcommands({})) known.push_back(sub->get_name());
      return absl::StrCat("unknown command '", path, " ", arg,
                          "' (commands: ", absl::StrJoin(known, ", "), "; see ", path, " --help)");
    }
    at = match.front();
    absl::StrAppend(&path, " ", arg);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr; stdout carries only what commands print (values, "listening on port N").
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("dgt", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  // `dgt status` reports failures itself; gRPC's own handshake errors only at debug level.
  dgt::rendezvous::RouteGrpcLogsToDebug();
  CLI::App app{"dgt: distributed-training launcher tools"};
  app.require_subcommand(1);
  // A repeated flag takes its last value, as dgt-run's (torchrun's argparse); subcommands
  // inherit the policy when they are added.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", absl::StrCat("dgt ", dgt::kVersion));
  std::function<int()> run;
  dgt::cli::AddStoreCommand(app, &run);
  dgt::cli::AddStatusCommand(app, &run);
  dgt::cli::AddDoctorCommand(app, &run);
  dgt::cli::AddRecoveryCommand(app, &run);
  dgt::cli::AddJobsCommands(app, &run);
  if (std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
    std::cerr << "dgt: error: " << unknown << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << "dgt " << dgt::kVersion << "\n";
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    // A usage error: exit 2 like dgt-run and dgt-rendezvous (CLI11's own codes are 100+).
    std::cerr << "dgt: error: " << e.what() << "\n";
    return 2;
  }
  if (!run) {
    std::cerr << app.help();
    return 2;
  }
  return run();
}
