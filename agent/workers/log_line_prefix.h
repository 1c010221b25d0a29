// The console prefix of worker output lines. dgt-run's default is "[rank<N>]: "; torchrun 2.13
// users set TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE to choose their own, and dgt-run honours it.
//
// Pure functions; thread-safe.
#ifndef DGT_AGENT_WORKERS_LOG_LINE_PREFIX_H_
#define DGT_AGENT_WORKERS_LOG_LINE_PREFIX_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dgt::agent {

// `tmpl` with ${role_name}, ${local_rank} and ${rank} (also written $role_name, ...) replaced,
// "$$" written as "$", and every other "$..." left as it is: the rules of Python's
// string.Template.safe_substitute, which torchrun 2.13's LocalElasticAgent applies to the
// template. The result is the whole prefix (torchrun adds no separator): "[${rank}]:" gives
// "[3]:line". Never fails.
std::string ExpandLogLinePrefix(absl::string_view tmpl, absl::string_view role_name, int rank,
                                int local_rank);

// The prefix of global rank `rank`: ExpandLogLinePrefix of `tmpl`, or "[rank<rank>]: " when
// `tmpl` is empty (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE unset or empty, as in torchrun).
std::string LogLinePrefix(absl::string_view tmpl, absl::string_view role_name, int rank,
                          int local_rank);

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_LOG_LINE_PREFIX_H_
