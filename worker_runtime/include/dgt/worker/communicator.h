// dgt::worker::Communicator — the collectives a trainer needs to keep training through a rank
// failure, by role: all-reduce (sum, min, max of int64 or float), broadcast, barrier and abort.
// GlooCommunicator (CPU, TCP) and NcclCommunicator (GPU, loaded at run time) implement it; the
// recovery logic (elastic_group.h) only sees this interface and a CommunicatorFactory.
//
// A communicator belongs to one generation of the group. It never recovers by itself: after a
// failure (or Abort) every call fails, and the trainer builds the next generation (Recover()).
//
// Thread-safety: collectives are called from one thread at a time; Abort may be called from any
// thread at any time, and makes a collective blocked in another thread return Aborted promptly.
#ifndef DGT_WORKER_COMMUNICATOR_H_
#define DGT_WORKER_COMMUNICATOR_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dgt/store/store.h"

namespace dgt::worker {

enum class ReduceOp { kSum, kMin, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0 <= rank < size, in this generation's numbering.
  virtual int size() const = 0;
  virtual int generation() const = 0;             // The generation this communicator was built for.
  virtual absl::string_view backend() const = 0;  // "gloo", "nccl", "fake".

  // Reduces `data` element-wise across all ranks, in place. Every rank gets the same bits (the
  // Gloo path adds contributions in rank order, so float sums are identical on all ranks).
  // Errors: Aborted after Abort(); Unavailable when a peer failed; DeadlineExceeded when the
  // operation timeout passed; FailedPrecondition when called again after an error.
  virtual absl::Status AllReduce(absl::Span<int64_t> data, ReduceOp op) = 0;
  virtual absl::Status AllReduce(absl::Span<float> data, ReduceOp op) = 0;

  // Copies `data` of rank `root` to every rank. Errors as AllReduce; InvalidArgument for a bad
  // root.
  virtual absl::Status Broadcast(absl::Span<int64_t> data, int root) = 0;

  // Returns once every rank entered the barrier. Errors as AllReduce.
  virtual absl::Status Barrier() = 0;

  // Fails the collective in progress (if any) and every later one with Aborted(reason).
  // Idempotent; callable from any thread.
  virtual void Abort(absl::string_view reason) = 0;
  virtual bool aborted() const = 0;
};

// Lets another thread abandon a bootstrap in progress (CommunicatorFactory::Create), e.g. when a
// newer generation was opened while this one was still forming (a member died mid-bootstrap).
// Thread-safety: every method may be called from any thread.
class BootstrapCancel {
 public:
  // Idempotent; the first call runs the registered action (outside the lock).
  void Cancel(absl::string_view reason);
  bool cancelled() const;
  std::string reason() const;
  // Registers what Cancel() must do to interrupt the bootstrap (runs at once when already
  // cancelled); nullptr clears it. The caller clears it before the action's captures die, and
  // Clear waits for an action running in another thread to return.
  void OnCancel(std::function<void()> action);

 private:
  mutable std::mutex mu_;
  std::condition_variable done_;  // An action finished running.
  bool cancelled_ = false;        // Guarded by mu_, as below.
  bool running_ = false;          // Cancel() is running action_.
  std::string reason_;
  std::function<void()> action_;
};

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  int generation = 0;
  // Namespace of this communicator's bootstrap keys in the store; callers use CommKeyPrefix().
  std::string key_prefix;
  // Deadline for the bootstrap (all ranks joined and connected).
  absl::Duration init_timeout = absl::Seconds(60);
  // Deadline for one collective.
  absl::Duration op_timeout = absl::Seconds(300);
  // When set and cancelled, Create returns Aborted promptly (Gloo: also a bootstrap blocked on a
  // peer that died after publishing its address). Null: the bootstrap runs to init_timeout.
  std::shared_ptr<BootstrapCancel> cancel;
};

// "dgt/comm/<group>/g<generation>": keys of different generations never collide, so a late rank
// of generation g cannot disturb generation g+1.
std::string CommKeyPrefix(absl::string_view group, int generation);

// Builds communicators of one backend; the recovery logic calls it once per generation.
class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  // Bootstraps through `store` (keys under options.key_prefix) with options.size ranks.
  // Errors: DeadlineExceeded when not every rank joined by init_timeout; Unavailable when a
  // peer or the store failed; InvalidArgument for bad options.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Create(
      store::Store& store, const CommunicatorOptions& options) = 0;
  virtual absl::string_view backend() const = 0;

  // Whether Shrink() can derive the next generation from the current communicator without a
  // new bootstrap (NCCL >= 2.27's ncclCommShrink). Default: no.
  virtual bool CanShrink() const { return false; }
  // The survivors' communicator: `current` without its ranks `exclude` (current numbering), at
  // next.generation, renumbered in order. Errors: Unimplemented when !CanShrink().
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Shrink(Communicator& current,
                                                               const std::vector<int>& exclude,
                                                               const CommunicatorOptions& next) {
    return absl::UnimplementedError("this backend cannot shrink a communicator in place");
  }
};

}  // namespace dgt::worker

#endif  // DGT_WORKER_COMMUNICATOR_H_
