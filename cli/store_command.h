// `dgt store ...`: the standalone store server (`serve`) and operator commands against a running
// store (`get`, `set`, `add`, `wait`, `keys`).
#ifndef DGT_CLI_STORE_COMMAND_H_
#define DGT_CLI_STORE_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace dgt::cli {

// Adds the `store` subcommand tree to `app`. When one of its commands is selected, `*run` is set
// to the function that runs it and returns the process exit code.
void AddStoreCommand(CLI::App& app, std::function<int()>* run);

}  // namespace dgt::cli

#endif  // DGT_CLI_STORE_COMMAND_H_
