// The flags of dgt-rendezvous (`dgt-rendezvous --help`; docs/ETCD.md, docs/JOBS.md): parsed and
// checked into the server layer's ServerOptions (server/server.h). A bad value is a usage error
// named by its flag, before anything starts: the listening addresses are probed, the token files
// read.
//
// Thread-safety: thread-compatible.
#ifndef DGT_SERVER_FLAGS_H_
#define DGT_SERVER_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/server.h"

namespace dgt::server {

struct ParsedFlags {
  // Set: exit now with this status, what to say already printed (--help and --version: 0; a
  // usage error: 2; a --listen port in use: 1).
  std::optional<int> exit_code;
  // The server's options when exit_code is unset.
  ServerOptions options;
};

// Parses argv. Prints help and version on stdout, errors on stderr as "dgt-rendezvous: error:
// <message>".
ParsedFlags ParseFlags(int argc, char** argv);

// The exit status of dgt-rendezvous for a failure: 2 for a usage error (InvalidArgument), 1 for a
// failure a retry may get past.
int ExitCodeFor(const absl::Status& status);

// Prints "dgt-rendezvous: error: <message>" on stderr.
void PrintError(const absl::Status& status);

}  // namespace dgt::server

#endif  // DGT_SERVER_FLAGS_H_
