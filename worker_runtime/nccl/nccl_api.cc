#include "dgt/worker/nccl_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace dgt::worker {
namespace {

// The CUDA runtime calls, by their C signatures (cudaError_t is an int-sized enum).
using CudaGetDeviceCount = cudaError_t (*)(int*);
using CudaSetDevice = cudaError_t (*)(int);
using CudaMalloc = cudaError_t (*)(void**, size_t);
using CudaFree = cudaError_t (*)(void*);
using CudaMemcpy = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind);
using CudaStreamCreate = cudaError_t (*)(cudaStream_t*);
using CudaStreamDestroy = cudaError_t (*)(cudaStream_t);
using CudaStreamQuery = cudaError_t (*)(cudaStream_t);
using CudaGetErrorString = const char* (*)(cudaError_t);

#define DGT_CUDA_RETURN(expr, what)                    \
  do {                                                 \
    cudaError_t e_ = (expr);                           \
    if (e_ != cudaSuccess) return CudaError(e_, what); \
  } while (0)

class RealNcclApi final : public NcclApi {
 public:
  absl::Status Load() {
    nccl_ = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (nccl_ == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot load libnccl.so.2: ", ::dlerror()));
    }
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      cudart_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (cudart_ != nullptr) break;
    }
    if (cudart_ == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot load the CUDA runtime: ", ::dlerror()));
    }
#define DGT_NCCL_SYM(lib, field, name) field = reinterpret_cast<decltype(field)>(::dlsym(lib, name))
    DGT_NCCL_SYM(nccl_, get_version_, "ncclGetVersion");
    DGT_NCCL_SYM(nccl_, get_unique_id_, "ncclGetUniqueId");
    DGT_NCCL_SYM(nccl_, init_config_, "ncclCommInitRankConfig");
    DGT_NCCL_SYM(nccl_, init_scalable_, "ncclCommInitRankScalable");
    DGT_NCCL_SYM(nccl_, async_error_, "ncclCommGetAsyncError");
    DGT_NCCL_SYM(nccl_, abort_, "ncclCommAbort");
    DGT_NCCL_SYM(nccl_, destroy_, "ncclCommDestroy");
    DGT_NCCL_SYM(nccl_, split_, "ncclCommSplit");
    DGT_NCCL_SYM(nccl_, shrink_, "ncclCommShrink");
    DGT_NCCL_SYM(nccl_, all_reduce_, "ncclAllReduce");
    DGT_NCCL_SYM(nccl_, broadcast_, "ncclBroadcast");
    DGT_NCCL_SYM(nccl_, error_string_, "ncclGetErrorString");
    DGT_NCCL_SYM(nccl_, count_, "ncclCommCount");
    DGT_NCCL_SYM(nccl_, user_rank_, "ncclCommUserRank");
    DGT_NCCL_SYM(cudart_, device_count_, "cudaGetDeviceCount");
    DGT_NCCL_SYM(cudart_, set_device_, "cudaSetDevice");
    DGT_NCCL_SYM(cudart_, malloc_, "cudaMalloc");
    DGT_NCCL_SYM(cudart_, free_, "cudaFree");
    DGT_NCCL_SYM(cudart_, memcpy_, "cudaMemcpy");
    DGT_NCCL_SYM(cudart_, stream_create_, "cudaStreamCreate");
    DGT_NCCL_SYM(cudart_, stream_destroy_, "cudaStreamDestroy");
    DGT_NCCL_SYM(cudart_, stream_query_, "cudaStreamQuery");
    DGT_NCCL_SYM(cudart_, cuda_error_string_, "cudaGetErrorString");
#undef DGT_NCCL_SYM
    if (!get_version_ || !get_unique_id_ || !init_config_ || !async_error_ || !abort_ ||
        !destroy_ || !all_reduce_ || !broadcast_ || !error_string_ || !count_ || !user_rank_) {
      return absl::FailedPreconditionError(
          "libnccl.so.2 lacks ncclCommInitRankConfig (NCCL "
          "2.14 or newer is required)");
    }
    if (!device_count_ || !set_device_ || !malloc_ || !free_ || !memcpy_ || !stream_create_ ||
        !stream_destroy_ || !stream_query_ || !cuda_error_string_) {
      return absl::FailedPreconditionError("the CUDA runtime lacks a required symbol");
    }
    get_version_(&version_);
    return absl::OkStatus();
  }

  int Version() override { return version_; }
  ncclResult_t GetUniqueId(ncclUniqueId* id) override { return get_unique_id_(id); }
  ncclResult_t CommInitRankConfig(ncclComm_t* c, int n, ncclUniqueId id, int r,
                                  ncclConfig_t* cfg) override {
    return init_config_(c, n, id, r, cfg);
  }
  ncclResult_t CommInitRankScalable(ncclComm_t* c, int n, int r, int nids, ncclUniqueId* ids,
                                    ncclConfig_t* cfg) override {
    return init_scalable_ ? init_scalable_(c, n, r, nids, ids, cfg) : ncclInvalidUsage;
  }
  ncclResult_t CommGetAsyncError(ncclComm_t c, ncclResult_t* e) override {
    return async_error_(c, e);
  }
  ncclResult_t CommAbort(ncclComm_t c) override { return abort_(c); }
  ncclResult_t CommDestroy(ncclComm_t c) override { return destroy_(c); }
  ncclResult_t CommSplit(ncclComm_t c, int color, int key, ncclComm_t* out,
                         ncclConfig_t* cfg) override {
    return split_ ? split_(c, color, key, out, cfg) : ncclInvalidUsage;
  }
  ncclResult_t CommShrink(ncclComm_t c, int* ex, int n, ncclComm_t* out, ncclConfig_t* cfg,
                          int flags) override {
    return shrink_ ? shrink_(c, ex, n, out, cfg, flags) : ncclInvalidUsage;
  }
  ncclResult_t AllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                         ncclComm_t c, cudaStream_t st) override {
    return all_reduce_(s, r, n, t, op, c, st);
  }
  ncclResult_t Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                         cudaStream_t st) override {
    return broadcast_(s, r, n, t, root, c, st);
  }
  std::string ErrorString(ncclResult_t r) override { return error_string_(r); }
  ncclResult_t CommCount(ncclComm_t c, int* n) override { return count_(c, n); }
  ncclResult_t CommUserRank(ncclComm_t c, int* r) override { return user_rank_(c, r); }

  absl::StatusOr<int> DeviceCount() override {
    int n = 0;
    DGT_CUDA_RETURN(device_count_(&n), "cudaGetDeviceCount");
    return n;
  }
  absl::Status SetDevice(int d) override {
    DGT_CUDA_RETURN(set_device_(d), "cudaSetDevice");
    return absl::OkStatus();
  }
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    void* p = nullptr;
    DGT_CUDA_RETURN(malloc_(&p, bytes), "cudaMalloc");
    return p;
  }
  void Free(void* p) override { free_(p); }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override {
    DGT_CUDA_RETURN(memcpy_(d, s, n, cudaMemcpyHostToDevice), "cudaMemcpy");
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override {
    DGT_CUDA_RETURN(memcpy_(d, s, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return absl::OkStatus();
  }
  absl::StatusOr<cudaStream_t> StreamCreate() override {
    cudaStream_t s = nullptr;
    DGT_CUDA_RETURN(stream_create_(&s), "cudaStreamCreate");
    return s;
  }
  void StreamDestroy(cudaStream_t s) override { stream_destroy_(s); }
  absl::StatusOr<bool> StreamDone(cudaStream_t s) override {
    cudaError_t e = stream_query_(s);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return absl::InternalError(absl::StrCat("cudaStreamQuery: ", cuda_error_string_(e)));
  }

 private:
  absl::Status CudaError(cudaError_t e, const char* what) {
    return absl::UnavailableError(absl::StrCat(what, ": ", cuda_error_string_(e)));
  }

  void* nccl_ = nullptr;
  void* cudart_ = nullptr;
  int version_ = 0;
  ncclResult_t (*get_version_)(int*) = nullptr;
  ncclResult_t (*get_unique_id_)(ncclUniqueId*) = nullptr;
  ncclResult_t (*init_config_)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*init_scalable_)(ncclComm_t*, int, int, int, ncclUniqueId*,
                                 ncclConfig_t*) = nullptr;
  ncclResult_t (*async_error_)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*abort_)(ncclComm_t) = nullptr;
  ncclResult_t (*destroy_)(ncclComm_t) = nullptr;
  ncclResult_t (*split_)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) = nullptr;
  ncclResult_t (*shrink_)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) = nullptr;
  ncclResult_t (*all_reduce_)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                              cudaStream_t) = nullptr;
  ncclResult_t (*broadcast_)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                             cudaStream_t) = nullptr;
  const char* (*error_string_)(ncclResult_t) = nullptr;
  ncclResult_t (*count_)(ncclComm_t, int*) = nullptr;
  ncclResult_t (*user_rank_)(ncclComm_t, int*) = nullptr;
  CudaGetDeviceCount device_count_ = nullptr;
  CudaSetDevice set_device_ = nullptr;
  CudaMalloc malloc_ = nullptr;
  CudaFree free_ = nullptr;
  CudaMemcpy memcpy_ = nullptr;
  CudaStreamCreate stream_create_ = nullptr;
  CudaStreamDestroy stream_destroy_ = nullptr;
  CudaStreamQuery stream_query_ = nullptr;
  CudaGetErrorString cuda_error_string_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclApi>> LoadRealNcclApi() {
  auto api = std::make_unique<RealNcclApi>();
  absl::Status s = api->Load();
  if (!s.ok()) return s;
  if (api->Version() < kNcclVersionConfig) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL ", api->Version(), " is too old: non-blocking init needs 2.14 (21400)"));
  }
  return std::unique_ptr<NcclApi>(std::move(api));
}

}  // namespace dgt::worker
