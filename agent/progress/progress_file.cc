#include "agent/progress/progress_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/progress_channel.h"

namespace dgt::agent {
namespace {

constexpr size_t kWordsPerSlot = kProgressSlotBytes / sizeof(uint64_t);

}  // namespace

absl::StatusOr<std::unique_ptr<ProgressFile>> ProgressFile::Create(const std::string& path,
                                                                   int slots) {
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("progress file needs >= 1 slot, got ", slots));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  const size_t bytes = static_cast<size_t>(slots) * kProgressSlotBytes;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return ErrnoToStatus(e, absl::StrCat("ftruncate ", path));
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);  // The mapping keeps the file.
  if (map == MAP_FAILED) {
    ::unlink(path.c_str());
    return ErrnoToStatus(e, absl::StrCat("mmap ", path));
  }
  return std::unique_ptr<ProgressFile>(new ProgressFile(path, slots, static_cast<uint64_t*>(map)));
}

ProgressFile::ProgressFile(std::string path, int slots, uint64_t* words)
    : path_(std::move(path)), slots_(slots), words_(words) {}

ProgressFile::~ProgressFile() {
  ::munmap(words_, static_cast<size_t>(slots_) * kProgressSlotBytes);
  ::unlink(path_.c_str());
}

void ProgressFile::Reset(int slot) {
  if (slot < 0 || slot >= slots_) return;
  for (size_t i = 0; i < kWordsPerSlot; ++i) {
    __atomic_store_n(&words_[slot * kWordsPerSlot + i], 0, __ATOMIC_RELAXED);
  }
}

uint64_t ProgressFile::Load(int slot, size_t offset) const {
  if (slot < 0 || slot >= slots_) return 0;
  return __atomic_load_n(&words_[slot * kWordsPerSlot + offset / sizeof(uint64_t)],
                         __ATOMIC_RELAXED);
}

ProgressSample ProgressFile::Read(int slot) const {
  ProgressSample s;
  s.counter = Load(slot, kProgressCounterOffset);
  s.waiting = Load(slot, kProgressWaitingOffset) != 0;
  return s;
}

pid_t ProgressFile::StacksPid(int slot) const {
  const uint64_t pid = Load(slot, kProgressStacksOffset);
  // A word no pid fits in is not a registration.
  return pid > 0 && pid <= static_cast<uint64_t>(std::numeric_limits<pid_t>::max())
             ? static_cast<pid_t>(pid)
             : 0;
}

}  // namespace dgt::agent
