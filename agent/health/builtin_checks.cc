#include "agent/health/builtin_checks.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dgt::agent {
namespace {

absl::Status Errno(const std::string& what, int err) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(text) : absl::UnavailableError(text);
}

class SystemFs final : public HealthFs {
 public:
  explicit SystemFs(std::string root) : root_(std::move(root)) {}

  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    DIR* dir = opendir(Full(path).c_str());
    if (dir == nullptr) return Errno(path, errno);
    std::vector<std::string> names;
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::StatusOr<std::string> Read(const std::string& path) override {
    std::ifstream in(Full(path));
    if (!in) return Errno(path, errno);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  absl::StatusOr<FsSpace> Space(const std::string& path) override {
    struct statvfs st {};
    if (statvfs(Full(path).c_str(), &st) != 0) return Errno(path, errno);
    FsSpace s;
    s.total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
    s.available = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    return s;
  }

  absl::Status ProbeWrite(const std::string& dir) override {
    std::string name = Full(dir) + "/.dgt-health-XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0) return Errno(absl::StrCat("cannot create a file in ", dir), errno);
    const char byte = 0;
    const bool wrote = write(fd, &byte, 1) == 1;
    const int err = errno;
    close(fd);
    unlink(name.c_str());
    if (!wrote) return Errno(absl::StrCat("cannot write a file in ", dir), err);
    return absl::OkStatus();
  }

 private:
  std::string Full(const std::string& path) const { return root_ + path; }
  std::string root_;
};

class GpuCount final : public HealthCheck {
 public:
  GpuCount(HealthFs* fs, int expected) : fs_(fs), expected_(expected) {}
  std::string name() const override { return "gpu-count"; }
  HealthResult Run(absl::Time) override {
    absl::StatusOr<std::vector<std::string>> names = fs_->List("/dev");
    if (!names.ok()) return {false, std::string(names.status().message())};
    int found = 0;
    for (const std::string& n : *names) {
      // nvidia0, nvidia1, ...: not nvidiactl, nvidia-uvm.
      if (absl::StartsWith(n, "nvidia") && n.size() > 6 &&
          std::all_of(n.begin() + 6, n.end(), [](char c) { return absl::ascii_isdigit(c); })) {
        ++found;
      }
    }
    if (found == expected_) return {true, absl::StrCat(found, " GPU(s)")};
    return {false, absl::StrCat("found ", found, " GPU(s) (/dev/nvidiaN), expected ", expected_,
                                " (--expected-gpus)")};
  }

 private:
  HealthFs* fs_;
  int expected_;
};

constexpr char kInfinibandDir[] = "/sys/class/infiniband";

class Infiniband final : public HealthCheck {
 public:
  explicit Infiniband(HealthFs* fs) : fs_(fs) {}
  std::string name() const override { return "infiniband"; }
  HealthResult Run(absl::Time) override {
    absl::StatusOr<std::vector<std::string>> devices = fs_->List(kInfinibandDir);
    if (!devices.ok() || devices->empty()) return {true, "no InfiniBand device"};
    // A device fails when none of its ports is ACTIVE: a dual-port adapter with its second port
    // unplugged is usable (network discovery exports only ACTIVE ports to NCCL), one with every
    // port down is not.
    std::vector<std::string> down;
    int active = 0;
    for (const std::string& dev : *devices) {
      const std::string ports_dir = absl::StrCat(kInfinibandDir, "/", dev, "/ports");
      absl::StatusOr<std::vector<std::string>> names = fs_->List(ports_dir);
      if (!names.ok()) {
        down.push_back(absl::StrCat(dev, ": ", names.status().message()));
        continue;
      }
      std::vector<std::string> states;
      int device_active = 0;
      for (const std::string& port : *names) {
        // "4: ACTIVE" (the state's number, then its name).
        absl::StatusOr<std::string> state = fs_->Read(absl::StrCat(ports_dir, "/", port, "/state"));
        std::string text = state.ok() ? *state : std::string(state.status().message());
        absl::StripAsciiWhitespace(&text);
        if (state.ok() && absl::EndsWith(text, "ACTIVE")) {
          ++device_active;
        } else {
          states.push_back(absl::StrCat("port ", port, " is ", text));
        }
      }
      active += device_active;
      if (device_active == 0) {
        down.push_back(states.empty() ? absl::StrCat(dev, " has no port")
                                      : absl::StrCat(dev, " has no ACTIVE port (",
                                                     absl::StrJoin(states, ", "), ")"));
      }
    }
    if (down.empty()) return {true, absl::StrCat(active, " InfiniBand port(s) ACTIVE")};
    return {false, absl::StrJoin(down, "; ")};
  }

 private:
  HealthFs* fs_;
};

class FreeDisk final : public HealthCheck {
 public:
  FreeDisk(HealthFs* fs, std::string what, std::string path, uint64_t min_free)
      : fs_(fs), what_(std::move(what)), path_(std::move(path)), min_free_(min_free) {}
  std::string name() const override { return absl::StrCat("disk:", path_); }
  HealthResult Run(absl::Time) override {
    absl::StatusOr<FsSpace> space = fs_->Space(path_);
    if (!space.ok()) {
      return {false, absl::StrCat("cannot read the free space of the ", what_, ": ",
                                  space.status().message())};
    }
    if (space->available >= min_free_) return {true, FormatBytes(space->available)};
    return {false, absl::StrCat("the ", what_, " ", path_, " has ", FormatBytes(space->available),
                                " free, below --min-free-disk=", FormatBytes(min_free_))};
  }

 private:
  HealthFs* fs_;
  std::string what_;
  std::string path_;
  uint64_t min_free_;
};

constexpr char kShmDir[] = "/dev/shm";

class Shm final : public HealthCheck {
 public:
  Shm(HealthFs* fs, uint64_t min_size) : fs_(fs), min_size_(min_size) {}
  std::string name() const override { return "shm"; }
  HealthResult Run(absl::Time) override {
    if (absl::Status s = fs_->ProbeWrite(kShmDir); !s.ok()) {
      return {false, std::string(s.message())};
    }
    absl::StatusOr<FsSpace> space = fs_->Space(kShmDir);
    if (!space.ok()) return {false, std::string(space.status().message())};
    if (space->total >= min_size_) return {true, FormatBytes(space->total)};
    return {false, absl::StrCat(kShmDir, " holds ", FormatBytes(space->total),
                                ", below --min-shm-size=", FormatBytes(min_size_))};
  }

 private:
  HealthFs* fs_;
  uint64_t min_size_;
};

}  // namespace

std::unique_ptr<HealthFs> SystemHealthFs(std::string root) {
  return std::make_unique<SystemFs>(std::move(root));
}

std::string FormatBytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  uint64_t whole = bytes;
  while (unit < 4 && whole >= 1024) {
    whole /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  const double scaled =
      static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << (10 * unit));
  // One decimal unless whole: "1.5 GiB", "64 MiB".
  const uint64_t tenths = static_cast<uint64_t>(std::llround(scaled * 10));
  if (tenths % 10 == 0) return absl::StrCat(tenths / 10, " ", kUnits[unit]);
  return absl::StrCat(tenths / 10, ".", tenths % 10, " ", kUnits[unit]);
}

std::unique_ptr<HealthCheck> GpuCountCheck(HealthFs* fs, int expected) {
  return std::make_unique<GpuCount>(fs, expected);
}
std::unique_ptr<HealthCheck> InfinibandCheck(HealthFs* fs) {
  return std::make_unique<Infiniband>(fs);
}
std::unique_ptr<HealthCheck> FreeDiskCheck(HealthFs* fs, std::string what, std::string path,
                                           uint64_t min_free) {
  return std::make_unique<FreeDisk>(fs, std::move(what), std::move(path), min_free);
}
std::unique_ptr<HealthCheck> ShmCheck(HealthFs* fs, uint64_t min_size) {
  return std::make_unique<Shm>(fs, min_size);
}

}  // namespace dgt::agent
