// Helpers shared by the files that implement Agent (agent.cc, agent_*.cc); not part of the
// agent library's interface.
#ifndef DGT_AGENT_AGENT_INTERNAL_H_
#define DGT_AGENT_AGENT_INTERNAL_H_

#include <string>

namespace dgt::agent {

// "SIGTERM" for 15; "signal N" for a number without a name.
std::string SignalName(int sig);

}  // namespace dgt::agent

#endif  // DGT_AGENT_AGENT_INTERNAL_H_
