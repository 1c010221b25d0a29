// The built-in node health checks (docs/RECOVERY.md "Node health checks"), each a HealthCheck
// over a small file-system seam (HealthFs) so that unit tests give them a fake /dev and /sys:
//   gpu-count    --expected-gpus N: the /dev/nvidiaN device nodes number exactly N.
//   infiniband   every device under /sys/class/infiniband has at least one ACTIVE port (an
//                unplugged second port is fine: discovery exports only ACTIVE ports to NCCL);
//                healthy with no such device (the node advertises none).
//   disk:PATH    the file system holding PATH (the log dir, the work dir) has at least
//                --min-free-disk bytes free.
//   shm          /dev/shm takes a file (write, then remove) and holds at least --min-shm-size
//                bytes in all.
//
// Thread-compatible.
#ifndef DGT_AGENT_HEALTH_BUILTIN_CHECKS_H_
#define DGT_AGENT_HEALTH_BUILTIN_CHECKS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/health/health_check.h"

namespace dgt::agent {

// Sizes of a file system, bytes.
struct FsSpace {
  uint64_t total = 0;
  uint64_t available = 0;  // Free to an unprivileged user (statvfs f_bavail).
};

// The file system as the built-in checks see it. Paths are absolute ("/dev", "/sys/class/...").
class HealthFs {
 public:
  virtual ~HealthFs() = default;
  // The names in directory `path`, without "." and "..". Errors: NotFound when it is absent.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& path) = 0;
  // The contents of a small file. Errors: NotFound, or the errno text.
  virtual absl::StatusOr<std::string> Read(const std::string& path) = 0;
  // The space of the file system holding `path`. Errors: the errno text.
  virtual absl::StatusOr<FsSpace> Space(const std::string& path) = 0;
  // Creates a file in directory `dir`, writes a byte, removes it. Errors: the errno text.
  virtual absl::Status ProbeWrite(const std::string& dir) = 0;
};

// The real file system, every path read under `root` ("" for "/"; a test's tree otherwise).
std::unique_ptr<HealthFs> SystemHealthFs(std::string root = "");

// "1.5 GiB", "64 MiB", "512 B": sizes in messages.
std::string FormatBytes(uint64_t bytes);

// `fs` is not owned and outlives the checks.
std::unique_ptr<HealthCheck> GpuCountCheck(HealthFs* fs, int expected);
std::unique_ptr<HealthCheck> InfinibandCheck(HealthFs* fs);
// `what` names the directory in messages ("log dir", "work dir").
std::unique_ptr<HealthCheck> FreeDiskCheck(HealthFs* fs, std::string what, std::string path,
                                           uint64_t min_free);
std::unique_ptr<HealthCheck> ShmCheck(HealthFs* fs, uint64_t min_size);

}  // namespace dgt::agent

#endif  // DGT_AGENT_HEALTH_BUILTIN_CHECKS_H_
