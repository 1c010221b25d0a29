// `dgt status`: what a rendezvous service knows — runs, rounds, nodes, ranks, last contact.
#ifndef DGT_CLI_STATUS_COMMAND_H_
#define DGT_CLI_STATUS_COMMAND_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "dgt/rendezvous/v1/rendezvous.pb.h"

namespace dgt::cli {

// Adds `status` to `app`; selecting it sets `*run`.
void AddStatusCommand(CLI::App& app, std::function<int()>* run);

// The human-readable table `dgt status` prints for `status`, with ages relative to `now_unix_s`.
std::string FormatStatus(const dgt::rendezvous::v1::GetStatusResponse& status, double now_unix_s);

}  // namespace dgt::cli

#endif  // DGT_CLI_STATUS_COMMAND_H_
