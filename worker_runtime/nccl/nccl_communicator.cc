#include "dgt/worker/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "dgt/store/prefix_store.h"

namespace dgt::worker {

std::vector<int> NcclRootRanks(int size, int version, const NcclOptions& options) {
  if (size < options.scalable_threshold || version < kNcclVersionScalable) return {0};
  const int per = std::max(1, options.ranks_per_root);
  int roots = std::clamp((size + per - 1) / per, 1, std::max(1, options.max_roots));
  roots = std::min(roots, size);
  std::vector<int> out;
  out.reserve(roots);
  for (int i = 0; i < roots; ++i) out.push_back(static_cast<int>(int64_t{i} * size / roots));
  return out;
}

namespace {

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kSum:
      break;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(NcclApi& api, const NcclOptions& nccl, const CommunicatorOptions& options,
                   ncclComm_t comm)
      : api_(api), nccl_(nccl), options_(options), comm_(comm) {}

  ~NcclCommunicator() override {
    StopWatcher();
    {
      dgt::MutexLock lock(&mu_);
      // Abort, not destroy: destroy may wait for peers that are gone.
      if (!released_ && comm_ != nullptr) api_.CommAbort(comm_);
      released_ = aborted_ = true;
      // Buffers of collectives that were abandoned while NCCL could still write them.
      for (void* p : orphans_) api_.Free(p);
      orphans_.clear();
    }
    if (stream_ != nullptr) api_.StreamDestroy(stream_);
  }

  // Waits for the communicator to leave ncclInProgress; aborts it on error or at the deadline.
  absl::Status WaitReady(absl::Time deadline, absl::string_view what) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      {
        dgt::MutexLock lock(&mu_);
        if (aborted_) return AbortedStatus();
        ncclResult_t r = api_.CommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) state = r;
      }
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        std::string msg = absl::StrCat(what, " failed: ", api_.ErrorString(state));
        Abort(msg);
        return absl::UnavailableError(msg);
      }
      if (absl::Now() >= deadline) {
        std::string msg = absl::StrCat(what, " did not finish in time");
        Abort(msg);
        return absl::DeadlineExceededError(msg);
      }
      absl::SleepFor(nccl_.poll_interval);
    }
  }

  absl::Status Start() {
    DGT_ASSIGN_OR_RETURN(stream_, api_.StreamCreate());
    watcher_ = std::thread([this] { Watch(); });
    return absl::OkStatus();
  }

  void set_generation(int g) { options_.generation = g; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  int generation() const override { return options_.generation; }
  absl::string_view backend() const override { return "nccl"; }

  absl::Status AllReduce(absl::Span<int64_t> data, ReduceOp op) override {
    return Run(data.data(), data.size() * sizeof(int64_t), data.size(), ncclInt64, op, -1);
  }
  absl::Status AllReduce(absl::Span<float> data, ReduceOp op) override {
    return Run(data.data(), data.size() * sizeof(float), data.size(), ncclFloat32, op, -1);
  }
  absl::Status Broadcast(absl::Span<int64_t> data, int root) override {
    if (root < 0 || root >= options_.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast root must be in [0, ", options_.size, "), got ", root));
    }
    return Run(data.data(), data.size() * sizeof(int64_t), data.size(), ncclInt64, ReduceOp::kSum,
               root);
  }
  absl::Status Barrier() override {
    int64_t zero = 0;
    return AllReduce(absl::MakeSpan(&zero, 1), ReduceOp::kSum);
  }

  void Abort(absl::string_view reason) override {
    dgt::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = std::string(reason);
    // Kept for ncclCommShrink (NCCL_SHRINK_ABORT stops its pending work); else aborted now.
    if (nccl_.keep_for_shrink && api_.Version() >= kNcclVersionShrink) return;
    if (comm_ != nullptr) api_.CommAbort(comm_);
    released_ = true;
  }
  bool aborted() const override {
    dgt::MutexLock lock(&mu_);
    return aborted_;
  }

  // Split / shrink: a child communicator, created under this one's lock.
  absl::StatusOr<std::unique_ptr<Communicator>> Child(bool shrink, int color, int key,
                                                      std::vector<int> exclude,
                                                      absl::Duration timeout) {
    const int version = api_.Version();
    if (!shrink && version < kNcclVersionSplit) {
      return absl::UnimplementedError(
          absl::StrCat("ncclCommSplit needs NCCL 2.18, have ", version));
    }
    if (shrink && version < kNcclVersionShrink) {
      return absl::UnimplementedError(
          absl::StrCat("ncclCommShrink needs NCCL 2.27, have ", version));
    }
    ncclConfig_t config = NonBlockingConfig();
    ncclComm_t child = nullptr;
    CommunicatorOptions o = options_;
    {
      dgt::MutexLock lock(&mu_);
      if (aborted_ && !shrink) return AbortedStatus();
      if (released_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "communicator generation ", options_.generation, " was aborted; it cannot be shrunk"));
      }
      ncclResult_t r =
          shrink ? api_.CommShrink(comm_, exclude.data(), static_cast<int>(exclude.size()), &child,
                                   &config, NCCL_SHRINK_ABORT)
                 : api_.CommSplit(comm_, color, key, &child, &config);
      if (r != ncclSuccess && r != ncclInProgress) {
        return absl::UnavailableError(
            absl::StrCat(shrink ? "ncclCommShrink" : "ncclCommSplit", ": ", api_.ErrorString(r)));
      }
    }
    if (child == nullptr) {
      return absl::UnavailableError("this rank is not part of the new communicator");
    }
    if (shrink) {
      std::sort(exclude.begin(), exclude.end());
      o.size = options_.size - static_cast<int>(exclude.size());
      o.rank = options_.rank -
               static_cast<int>(std::lower_bound(exclude.begin(), exclude.end(), options_.rank) -
                                exclude.begin());
      o.generation = options_.generation + 1;
    }
    auto c = std::make_unique<NcclCommunicator>(api_, nccl_, o, child);
    DGT_RETURN_IF_ERROR(
        c->WaitReady(absl::Now() + timeout, shrink ? "ncclCommShrink" : "ncclCommSplit"));
    if (!shrink) {
      // A split child's shape is NCCL's to tell.
      int n = 0, r = 0;
      if (api_.CommCount(child, &n) != ncclSuccess || api_.CommUserRank(child, &r) != ncclSuccess)
        return absl::UnavailableError("ncclCommCount/ncclCommUserRank failed on a split child");
      c->options_.size = n;
      c->options_.rank = r;
    }
    DGT_RETURN_IF_ERROR(c->Start());
    return std::unique_ptr<Communicator>(std::move(c));
  }

 private:
  absl::Status AbortedStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(
        absl::StrCat("communicator generation ", options_.generation, " aborted: ", abort_reason_));
  }

  absl::Status Run(void* host, size_t bytes, size_t count, ncclDataType_t type, ReduceOp op,
                   int root) {
    if (count == 0) return absl::OkStatus();
    const absl::Time deadline = absl::Now() + options_.op_timeout;
    DGT_ASSIGN_OR_RETURN(void* dev, api_.Malloc(bytes));
    // Freed on return, unless NCCL may still write it (an abandoned collective): then it is kept
    // until the communicator is gone.
    struct Freer {
      NcclCommunicator* self;
      void* p;
      bool done = false;
      ~Freer() {
        if (done) {
          self->api_.Free(p);
        } else {
          dgt::MutexLock lock(&self->mu_);
          self->orphans_.push_back(p);
        }
      }
    } freer{this, dev};
    if (absl::Status s = api_.CopyToDevice(dev, host, bytes); !s.ok()) {
      freer.done = true;
      return s;
    }
    {
      dgt::MutexLock lock(&mu_);
      if (aborted_) return AbortedStatus();
      ncclResult_t r = root < 0 ? api_.AllReduce(dev, dev, count, type, ToNccl(op), comm_, stream_)
                                : api_.Broadcast(dev, dev, count, type, root, comm_, stream_);
      if (r != ncclSuccess && r != ncclInProgress) {
        freer.done = true;
        return absl::UnavailableError(absl::StrCat("nccl collective: ", api_.ErrorString(r)));
      }
    }
    while (true) {
      DGT_ASSIGN_OR_RETURN(bool done, api_.StreamDone(stream_));
      if (done) {
        freer.done = true;
        break;
      }
      ncclResult_t state = ncclSuccess;
      {
        dgt::MutexLock lock(&mu_);
        if (aborted_) return AbortedStatus();
        api_.CommGetAsyncError(comm_, &state);
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string msg = absl::StrCat("nccl collective failed: ", api_.ErrorString(state));
        Abort(msg);
        return absl::UnavailableError(msg);
      }
      if (absl::Now() >= deadline) {
        Abort("collective timed out");
        return absl::DeadlineExceededError(absl::StrCat("nccl collective did not finish in ",
                                                        absl::FormatDuration(options_.op_timeout)));
      }
      absl::SleepFor(nccl_.poll_interval);
    }
    return api_.CopyToHost(host, dev, bytes);
  }

  void Watch() {
    while (true) {
      {
        dgt::MutexLock lock(&stop_mu_);
        const absl::Time until = absl::Now() + nccl_.watch_interval;
        while (!stop_ && !stop_cv_.WaitWithDeadline(&stop_mu_, until)) {
        }
        if (stop_) return;
      }
      ncclResult_t state = ncclSuccess;
      {
        dgt::MutexLock lock(&mu_);
        if (aborted_) return;
        api_.CommGetAsyncError(comm_, &state);
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string msg = absl::StrCat("NCCL async error on generation ", options_.generation,
                                       " rank ", options_.rank, ": ", api_.ErrorString(state));
        spdlog::error("{}; aborting the communicator", msg);
        Abort(msg);
        if (nccl_.on_async_error) nccl_.on_async_error(absl::UnavailableError(msg));
        return;
      }
    }
  }

  void StopWatcher() {
    {
      dgt::MutexLock lock(&stop_mu_);
      stop_ = true;
      stop_cv_.SignalAll();
    }
    if (watcher_.joinable()) watcher_.join();
  }

  NcclApi& api_;
  const NcclOptions nccl_;
  CommunicatorOptions options_;
  mutable dgt::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;  // ncclCommAbort was called.
  std::vector<void*> orphans_ ABSL_GUARDED_BY(mu_);
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  cudaStream_t stream_ = nullptr;
  dgt::Mutex stop_mu_;
  dgt::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread watcher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Create(
    store::Store& store, const CommunicatorOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank must be in [0, ", options.size, "), got ", options.rank));
  }
  const absl::Time deadline = absl::Now() + options.init_timeout;
  if (options_.device >= 0) DGT_RETURN_IF_ERROR(api_.SetDevice(options_.device));
  const int version = api_.Version();
  const std::vector<int> roots = NcclRootRanks(options.size, version, options_);
  store::PrefixStore prefixed(options.key_prefix, store);
  std::vector<std::string> keys;
  for (size_t i = 0; i < roots.size(); ++i) {
    keys.push_back(absl::StrCat("nccl_id/", i));
    if (roots[i] == options.rank) {
      ncclUniqueId id;
      if (ncclResult_t r = api_.GetUniqueId(&id); r != ncclSuccess) {
        return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", api_.ErrorString(r)));
      }
      DGT_RETURN_IF_ERROR(
          prefixed.Set(keys.back(), absl::string_view(id.internal, sizeof(id.internal))));
    }
  }
  DGT_RETURN_IF_ERROR(prefixed.Wait(keys, std::max(absl::ZeroDuration(), deadline - absl::Now())));
  std::vector<ncclUniqueId> ids(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    DGT_ASSIGN_OR_RETURN(std::string v, prefixed.Get(keys[i]));
    if (v.size() != sizeof(ids[i].internal)) {
      return absl::InternalError(absl::StrCat("store key ", prefixed.Join(keys[i]), " holds ",
                                              v.size(), " bytes, not an ncclUniqueId"));
    }
    std::memcpy(ids[i].internal, v.data(), v.size());
  }
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t r =
      ids.size() > 1 ? api_.CommInitRankScalable(&comm, options.size, options.rank,
                                                 static_cast<int>(ids.size()), ids.data(), &config)
                     : api_.CommInitRankConfig(&comm, options.size, ids[0], options.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) api_.CommAbort(comm);
    return absl::UnavailableError(absl::StrCat("nccl init: ", api_.ErrorString(r)));
  }
  auto c = std::make_unique<NcclCommunicator>(api_, options_, options, comm);
  DGT_RETURN_IF_ERROR(
      c->WaitReady(deadline, absl::StrCat("nccl init of generation ", options.generation, " rank ",
                                          options.rank, "/", options.size)));
  DGT_RETURN_IF_ERROR(c->Start());
  return std::unique_ptr<Communicator>(std::move(c));
}

bool NcclCommunicatorFactory::CanShrink() const {
  return options_.keep_for_shrink && api_.Version() >= kNcclVersionShrink;
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Shrink(
    Communicator& current, const std::vector<int>& exclude, const CommunicatorOptions& next) {
  DGT_ASSIGN_OR_RETURN(auto c, ShrinkNcclCommunicator(current, exclude, next.init_timeout));
  static_cast<NcclCommunicator*>(c.get())->set_generation(next.generation);
  return c;
}

absl::StatusOr<std::unique_ptr<Communicator>> SplitNcclCommunicator(Communicator& parent, int color,
                                                                    int key,
                                                                    absl::Duration timeout) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&parent);
  if (nccl == nullptr) return absl::InvalidArgumentError("not an NCCL communicator");
  return nccl->Child(false, color, key, {}, timeout);
}

absl::StatusOr<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(
    Communicator& parent, const std::vector<int>& exclude, absl::Duration timeout) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&parent);
  if (nccl == nullptr) return absl::InvalidArgumentError("not an NCCL communicator");
  return nccl->Child(true, 0, 0, exclude, timeout);
}

}  // namespace dgt::worker
