// Internal to the agent library: the action builders shared by the NodeLifecycle's source files
// (node_lifecycle.cc, node_lifecycle_workers.cc). Not a public header.
#ifndef DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_
#define DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_

#include <string>
#include <utility>

#include "agent/lifecycle/node_lifecycle.h"

namespace dgt::agent::lifecycle_internal {

using Kind = LifecycleAction::Kind;
using Level = LifecycleAction::Level;

// An action of `kind` with every other field at its default.
inline LifecycleAction Make(Kind kind) {
  LifecycleAction a;
  a.kind = kind;
  return a;
}

// A kLog action: one line of the agent's log at `level`.
inline LifecycleAction Log(Level level, std::string text) {
  LifecycleAction a = Make(Kind::kLog);
  a.level = level;
  a.text = std::move(text);
  return a;
}

}  // namespace dgt::agent::lifecycle_internal

#endif  // DGT_AGENT_LIFECYCLE_NODE_LIFECYCLE_INTERNAL_H_
