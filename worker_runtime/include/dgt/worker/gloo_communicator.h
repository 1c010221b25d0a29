// GlooCommunicatorFactory — communicators over Gloo's TCP transport (Debian's libgloo), so every
// recovery path runs on CPU-only machines. Bootstrap goes through a dgt store (a gloo
// rendezvous::Store adapter over dgt::store::Store, keys under CommunicatorOptions::key_prefix).
//
// Collectives exchange each rank's buffer with every peer over Gloo's unbound buffers and reduce
// locally in rank order: every survivor talks to the failed rank directly, so all of them see its
// death at once, and Abort() can cancel the waits (abortWaitRecv/abortWaitSend). Meant for the
// small control-plane tensors of the examples and tests (O(size) messages per rank per call),
// not for gradient-sized buffers.
//
// Create() sets SIGPIPE to SIG_IGN when it has its default disposition: Gloo writes to sockets
// with write(2), and a peer's death must fail the collective, not kill the survivor.
//
// Thread-safety: as Communicator.
#ifndef DGT_WORKER_GLOO_COMMUNICATOR_H_
#define DGT_WORKER_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "dgt/worker/communicator.h"

namespace dgt::worker {

struct GlooOptions {
  // Address this process listens on and advertises to its peers (an IP literal of a local
  // interface). Default loopback, for single-node jobs and tests.
  std::string hostname = "127.0.0.1";
};

class GlooCommunicatorFactory final : public CommunicatorFactory {
 public:
  explicit GlooCommunicatorFactory(GlooOptions options = {}) : options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<Communicator>> Create(store::Store& store,
                                                       const CommunicatorOptions& options) override;
  absl::string_view backend() const override { return "gloo"; }

 private:
  GlooOptions options_;
};

}  // namespace dgt::worker

#endif  // DGT_WORKER_GLOO_COMMUNICATOR_H_
