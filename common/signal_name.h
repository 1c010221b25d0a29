// Signal names for messages ("SIGTERM"), shared by dgt-run's lifecycle and the node health
// checks that dgt-agent runs too.
//
// Thread-safe: a pure function.
#ifndef DGT_COMMON_SIGNAL_NAME_H_
#define DGT_COMMON_SIGNAL_NAME_H_

#include <string>

namespace dgt {

// "SIGTERM" for 15; "signal N" for a number without a name.
std::string SignalName(int sig);

}  // namespace dgt

#endif  // DGT_COMMON_SIGNAL_NAME_H_
