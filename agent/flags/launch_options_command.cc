// ResolveCommand (launch_options_internal.h): the training script and its arguments, the checks
// that need them, then the interpreter and the console prefix from the environment.
#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/flags/launch_options.h"
#include "agent/flags/launch_options_internal.h"

namespace dgt::agent::launch_internal {

absl::Status ResolveCommand(const std::vector<std::string>& rest_in,
                            const char* (*getenv_fn)(const char*), LaunchOptions* o) {
  // "--" ends the flags, as in torchrun's argparse: what follows is the script, even "-x.py".
  const bool dashdash = !rest_in.empty() && rest_in[0] == "--";
  const std::vector<std::string> rest(rest_in.begin() + (dashdash ? 1 : 0), rest_in.end());
  if (rest.empty())
    return Bad(
        "missing the training script (usage: dgt-run [flags] [--] script.py "
        "[script args])");
  if (!dashdash && rest[0].size() > 1 && rest[0][0] == '-') {
    return Bad(absl::StrCat("unknown flag '", rest[0], "' (see dgt-run --help)"));
  }
  o->command = rest;
  // torchrun's argparse (2.13 on Python 3.11) also drops a first "--" right after the script:
  // "train.py -- a" gives the script ['a'], "train.py a -- b" ['a', '--', 'b'].
  if (!dashdash && o->command.size() > 1 && o->command[1] == "--") {
    o->command.erase(o->command.begin() + 1);
  }
  if (o->module && o->no_python) return Bad("-m/--module and --no-python exclude each other");
  if (o->run_path && (o->module || o->no_python)) {
    return Bad("--run-path excludes -m/--module and --no-python");
  }
  if (o->virtual_local_rank) {
    // torchrun 2.13 fails a worker whose local rank has no entry in CUDA_VISIBLE_DEVICES when it
    // starts; here before anything starts.
    if (const char* visible = getenv_fn("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
      const size_t entries = std::vector<absl::string_view>(absl::StrSplit(visible, ',')).size();
      if (static_cast<size_t>(o->nproc_per_node) > entries) {
        return Bad(absl::StrCat("--virtual-local-rank: local rank ", entries,
                                " has no device in CUDA_VISIBLE_DEVICES='", visible,
                                "' (--nproc-per-node=", o->nproc_per_node, ")"));
      }
    }
  }
  if (!o->no_python && !o->module) {
    // "dgt-run -- -- train.py a": torchrun 2.13's argparse takes the second "--" for the script
    // and runs "python -u -- train.py a", where "--" ends Python's own flags: train.py runs with
    // ['a']. The same argv here; the file checked is the one Python opens.
    const bool python_dashdash = !o->run_path && o->command.size() > 1 && o->command[0] == "--";
    const std::string& script = o->command[python_dashdash ? 1 : 0];
    std::error_code ec;
    if (std::filesystem::is_directory(script, ec)) {
      return Bad(absl::StrCat("training script '", script, "' is a directory"));
    }
    if (!std::filesystem::is_regular_file(script, ec)) {
      return absl::NotFoundError(absl::StrCat("training script '", script, "' does not exist"));
    }
  }
  if (const char* py = getenv_fn("DGT_PYTHON"); py != nullptr && *py != '\0') o->python = py;
  // torchrun's interpreter override wins: it is what a torchrun user sets for this launch.
  if (const char* py = getenv_fn("PYTHON_EXEC"); py != nullptr && *py != '\0') o->python = py;
  if (const char* t = getenv_fn("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); t != nullptr) {
    o->log_line_prefix_template = t;
  }
  return absl::OkStatus();
}

}  // namespace dgt::agent::launch_internal
