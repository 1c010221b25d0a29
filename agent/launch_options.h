// LaunchOptions: everything `dgt-run` was asked to do, parsed and validated from a
// torchrun-compatible command line. Every multi-word flag accepts dash and underscore spellings.
#ifndef DGT_AGENT_LAUNCH_OPTIONS_H_
#define DGT_AGENT_LAUNCH_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dgt::agent {

struct LaunchOptions {
  int min_nodes = 1;  // --nnodes MIN[:MAX]
  int max_nodes = 1;
  int nproc_per_node = 1;
  // "host:port" of the rendezvous service; empty with --standalone (embedded on a free port).
  std::string rdzv_endpoint;
  std::string run_id = "none";  // --rdzv-id (torchrun's default is "none").
  bool standalone = false;
  int max_restarts = 0;
  bool no_python = false;
  bool module = false;            // -m: run the script as a Python module.
  std::string local_addr;         // Address advertised to other nodes (--local-addr).
  std::string node_id;            // Default "<hostname>:<pid>".
  double join_timeout_s = 600;    // Wait for the round to close (--rdzv-conf join_timeout).
  double last_call_timeout_s = 30;  // --rdzv-conf last_call_timeout.
  double connect_timeout_s = 30;  // Reach the rendezvous endpoint (--rdzv-connect-timeout).
  double stop_timeout_s = 30;     // SIGTERM → SIGKILL grace when stopping workers.
  // Interpreter for scripts: $DGT_PYTHON, else "python3" from PATH.
  std::string python = "python3";
  // The training script (or program with --no-python, or module with -m) and its arguments.
  std::vector<std::string> command;
};

// The result of parsing a command line: options to run, or an exit code plus text to print
// (for --help, --version and usage errors).
struct ParsedCommandLine {
  std::optional<LaunchOptions> options;
  int exit_code = 0;
  std::string output;  // For stdout when exit_code is 0, else for stderr.
};

// Parses dgt-run's arguments (argv[0] excluded). Usage errors give exit code 2 and a one-line
// message naming the flag and value, e.g. "--nproc-per-node must be >= 1, got 0".
// `getenv` supplies DGT_PYTHON (a seam for tests).
ParsedCommandLine ParseDgtRunCommandLine(const std::vector<std::string>& args,
                                         const char* (*getenv_fn)(const char*) = nullptr);

}  // namespace dgt::agent

#endif  // DGT_AGENT_LAUNCH_OPTIONS_H_
