// Internal to the agent library: the action builders shared by the NodeLifecycle's source files
// (node_lifecycle.cc, node_lifecycle_workers.cc). Not a public header.
#ifndef DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_
#define DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_

#include <string>
#include <utility>

#include "agent/lifecycle/node_lifecycle.h"

namespace dgt::agent::lifecycle_internal {

using Level = actions::Level;

// A Log action: one line of the agent's log at `level`.
inline LifecycleAction Log(Level level, std::string text) {
  return actions::Log{level, std::move(text)};
}

}  // namespace dgt::agent::lifecycle_internal

#endif  // DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_
