// NcclCommunicatorFactory — NCCL communicators behind the Communicator interface, for GPU jobs.
//
// Bootstrap: root ranks call ncclGetUniqueId and publish the ids in the store under
// CommunicatorOptions::key_prefix + "/nccl_id/<i>" (so ids are namespaced by generation); every
// rank waits for them (init_timeout) and calls ncclCommInitRankConfig in non-blocking mode
// (config.blocking = 0), or ncclCommInitRankScalable with several roots when the world has at
// least NcclOptions::scalable_threshold ranks and NCCL is 2.23 or newer. It then polls
// ncclCommGetAsyncError until the communicator is ready, or aborts it at the deadline or on an
// error. (NCCL's non-blocking API offers no completion event, so these waits poll, every
// poll_interval, always bounded by a deadline.)
//
// After init an async-error watcher thread checks ncclCommGetAsyncError every watch_interval;
// on an error it aborts the communicator (so a blocked collective returns) and reports through
// NcclOptions::on_async_error. Collectives take host buffers, copy them to the device, run on the
// communicator's stream and wait for it with the operation deadline.
//
// Thread-safety: as Communicator; NCCL calls on one communicator are serialised by a mutex.
#ifndef DGT_WORKER_NCCL_COMMUNICATOR_H_
#define DGT_WORKER_NCCL_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <vector>

#include "dgt/worker/communicator.h"
#include "dgt/worker/nccl_api.h"

namespace dgt::worker {

struct NcclOptions {
  // CUDA device to bind before init; -1 leaves the current device.
  int device = -1;
  // World size from which several roots bootstrap (ncclCommInitRankScalable).
  int scalable_threshold = 1024;
  // About one root per this many ranks, at most max_roots.
  int ranks_per_root = 128;
  int max_roots = 32;
  // Polling period of non-blocking NCCL calls and stream completion.
  absl::Duration poll_interval = absl::Milliseconds(1);
  // Period of the async-error watcher.
  absl::Duration watch_interval = absl::Milliseconds(100);
  // Abort() leaves the NCCL communicator alive (it only fails the waits) when NCCL has
  // ncclCommShrink (>= 2.27), so ElasticGroup's shrink mode can shrink it with NCCL_SHRINK_ABORT,
  // which stops its pending work; the communicator is aborted when destroyed.
  bool keep_for_shrink = false;
  // Called from the watcher thread after it aborted the communicator on an async error (e.g. to
  // report to the agent or open the next generation).
  std::function<void(const absl::Status&)> on_async_error;
};

// The ranks that create unique ids for a world of `size` with NCCL `version`: {0} below the
// threshold (or before 2.23), else evenly spread roots.
std::vector<int> NcclRootRanks(int size, int version, const NcclOptions& options);

class NcclCommunicatorFactory final : public CommunicatorFactory {
 public:
  // `api` must outlive the factory and its communicators.
  NcclCommunicatorFactory(NcclApi& api, NcclOptions options = {})
      : api_(api), options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<Communicator>> Create(store::Store& store,
                                                       const CommunicatorOptions& options) override;
  absl::string_view backend() const override { return "nccl"; }
  // With keep_for_shrink and NCCL >= 2.27: ncclCommShrink of the current communicator.
  bool CanShrink() const override;
  absl::StatusOr<std::unique_ptr<Communicator>> Shrink(Communicator& current,
                                                       const std::vector<int>& exclude,
                                                       const CommunicatorOptions& next) override;

 private:
  NcclApi& api_;
  NcclOptions options_;
};

// ncclCommSplit of an NCCL communicator (non-blocking, with `timeout`): ranks with the same
// `color` form a new communicator, ordered by `key`. Errors: InvalidArgument when `parent` is
// not NCCL; Unimplemented before NCCL 2.18; as Create otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> SplitNcclCommunicator(Communicator& parent, int color,
                                                                    int key,
                                                                    absl::Duration timeout);

// ncclCommShrink with NCCL_SHRINK_ABORT: the survivors' communicator without `exclude` (ranks of
// `parent`), numbered in order. Errors: Unimplemented before NCCL 2.27 (callers then rebuild a
// new generation through the store instead); as Create otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(
    Communicator& parent, const std::vector<int>& exclude, absl::Duration timeout);

}  // namespace dgt::worker

#endif  // DGT_WORKER_NCCL_COMMUNICATOR_H_
