#include "common/signal_name.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dgt {

std::string SignalName(int sig) {
  const char* name = sigabbrev_np(sig);
  return name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", sig);
}

}  // namespace dgt
