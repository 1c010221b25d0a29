// Slurm's hostlist expressions (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST, `scontrol show
// hostnames`) and its task-count lists (SLURM_STEP_TASKS_PER_NODE), expanded into plain lists.
//
// Thread-safe: pure functions.
#ifndef DGT_AGENT_FLAGS_HOSTLIST_H_
#define DGT_AGENT_FLAGS_HOSTLIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt::agent {

// The most names one expression may expand to: a typo such as "n[0-99999999]" is refused before
// it allocates.
inline constexpr int kMaxHostlistHosts = 65536;

// Expands a hostlist expression as Slurm does: comma-separated entries, each a name with any
// number of bracket groups of numbers and ranges ("gpu[01-04,07]", "r[1-2]n[01-02]"). A range
// keeps the width of its lower bound ("[08-10]" -> 08, 09, 10). Several groups in one name expand
// left to right, the first group outermost. Order and repeats are kept as written.
// `what` names the list in errors (e.g. "SLURM_JOB_NODELIST").
// Errors: InvalidArgument naming `what` and the list, for an empty list or entry, unbalanced or
// nested brackets, a range that is not digits, a range whose end is below its start, or more
// than kMaxHostlistHosts names.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list,
                                                        absl::string_view what);

// Expands Slurm's task-count list ("2(x3),1" -> 2, 2, 2, 1), one count per node.
// Errors: InvalidArgument naming `what` and the list for anything else.
absl::StatusOr<std::vector<int>> ExpandTaskCounts(absl::string_view list, absl::string_view what);

}  // namespace dgt::agent

#endif  // DGT_AGENT_FLAGS_HOSTLIST_H_
