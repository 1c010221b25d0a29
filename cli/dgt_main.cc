// `dgt`: the operator's command line. Each command group registers itself here; a group sets the
// function to run when one of its commands is picked, so main stays a table of groups.
#include <functional>
#include <iostream>

#include "CLI/CLI.hpp"
#include "cli/doctor_command.h"
#include "cli/recovery_command.h"
#include "cli/status_command.h"
#include "cli/store_command.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // Logs go to stderr; stdout carries only what commands print (values, "listening on port N").
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("dgt", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  CLI::App app{"dgt: distributed-training launcher tools"};
  app.require_subcommand(1);
  std::function<int()> run;
  dgt::cli::AddStoreCommand(app, &run);
  dgt::cli::AddStatusCommand(app, &run);
  dgt::cli::AddDoctorCommand(app, &run);
  dgt::cli::AddRecoveryCommand(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
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
