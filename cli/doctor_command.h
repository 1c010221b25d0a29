// `dgt doctor`: what this node offers a training job — RDMA devices and ports, the interface that
// routes to the store, and the NCCL_* variables dgt derives from them, each with its reason.
#ifndef DGT_CLI_DOCTOR_COMMAND_H_
#define DGT_CLI_DOCTOR_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace dgt::cli {

// Adds the `doctor` subcommand to `app`; `*run` is set when it is selected.
void AddDoctorCommand(CLI::App& app, std::function<int()>* run);

}  // namespace dgt::cli

#endif  // DGT_CLI_DOCTOR_COMMAND_H_
