// `dgt recovery fail --endpoint H:P --rank R`: publishes a rank's failure into a job's store the
// way the agent does under `--restart-policy rank` (dgt/worker/recovery_keys.h), for operators
// and test harnesses.
#ifndef DGT_CLI_RECOVERY_COMMAND_H_
#define DGT_CLI_RECOVERY_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace dgt::cli {

void AddRecoveryCommand(CLI::App& app, std::function<int()>* run);

}  // namespace dgt::cli

#endif  // DGT_CLI_RECOVERY_COMMAND_H_
