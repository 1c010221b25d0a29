// dgt::worker::NcclApi — the NCCL and CUDA runtime calls dgt's NCCL communicator makes, as an
// interface: RealNcclApi resolves them at run time with dlopen("libnccl.so.2") and
// dlopen("libcudart.so"), so one build runs on machines without a GPU or NCCL; tests use a fake.
// nccl.h is included for its types only (nothing links against libnccl).
//
// Thread-safety: RealNcclApi is immutable after Load(); NCCL's own rules apply to the calls.
#ifndef DGT_WORKER_NCCL_API_H_
#define DGT_WORKER_NCCL_API_H_

#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dgt::worker {

// First NCCL versions of the calls used (REFERENCE.md §5), as NCCL_VERSION_CODE values.
inline constexpr int kNcclVersionConfig = 21400;    // CommInitRankConfig, non-blocking mode.
inline constexpr int kNcclVersionSplit = 21800;     // CommSplit.
inline constexpr int kNcclVersionScalable = 22300;  // CommInitRankScalable.
inline constexpr int kNcclVersionShrink = 22700;    // CommShrink.

class NcclApi {
 public:
  virtual ~NcclApi() = default;
  virtual int Version() = 0;  // The loaded library's NCCL_VERSION_CODE.
  virtual ncclResult_t GetUniqueId(ncclUniqueId* id) = 0;
  virtual ncclResult_t CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                          ncclConfig_t* config) = 0;
  virtual ncclResult_t CommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nids,
                                            ncclUniqueId* ids, ncclConfig_t* config) = 0;
  virtual ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* error) = 0;
  virtual ncclResult_t CommAbort(ncclComm_t comm) = 0;
  virtual ncclResult_t CommDestroy(ncclComm_t comm) = 0;
  virtual ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out,
                                 ncclConfig_t* config) = 0;
  virtual ncclResult_t CommShrink(ncclComm_t comm, int* exclude, int count, ncclComm_t* out,
                                  ncclConfig_t* config, int flags) = 0;
  virtual ncclResult_t AllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t Broadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                                 int root, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual std::string ErrorString(ncclResult_t result) = 0;
  virtual ncclResult_t CommCount(ncclComm_t comm, int* count) = 0;
  virtual ncclResult_t CommUserRank(ncclComm_t comm, int* rank) = 0;

  // CUDA runtime pieces for the host-buffer collectives of the Communicator interface.
  virtual absl::StatusOr<int> DeviceCount() = 0;
  virtual absl::Status SetDevice(int device) = 0;
  virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::StatusOr<cudaStream_t> StreamCreate() = 0;
  virtual void StreamDestroy(cudaStream_t stream) = 0;
  // True when all work on `stream` finished; Internal error when it failed.
  virtual absl::StatusOr<bool> StreamDone(cudaStream_t stream) = 0;
};

// Loads libnccl.so.2 (and the CUDA runtime). Errors: NotFound naming the library and dlerror()
// when it cannot be loaded; FailedPrecondition when NCCL is older than 2.14.
absl::StatusOr<std::unique_ptr<NcclApi>> LoadRealNcclApi();

}  // namespace dgt::worker

#endif  // DGT_WORKER_NCCL_API_H_
