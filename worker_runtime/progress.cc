#include "dgt/worker/progress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "absl/strings/numbers.h"
#include "common/progress_channel.h"

namespace dgt::worker {
namespace {

// The mapped slot, or null without one. Mapped once, never unmapped (the process ends first).
uint64_t* Slot() {
  static uint64_t* slot = []() -> uint64_t* {
    const char* path = std::getenv(kProgressFileEnv);
    const char* slot_text = std::getenv(kProgressSlotEnv);
    int index = 0;
    if (path == nullptr || slot_text == nullptr || !absl::SimpleAtoi(slot_text, &index) ||
        index < 0) {
      return nullptr;
    }
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st;
    const size_t end = (static_cast<size_t>(index) + 1) * kProgressSlotBytes;
    void* map = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= end) {
      map = ::mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
    if (map == MAP_FAILED) return nullptr;
    return static_cast<uint64_t*>(map) + index * (kProgressSlotBytes / sizeof(uint64_t));
  }();
  return slot;
}

void AddWord(size_t offset, int64_t delta) {
  uint64_t* slot = Slot();
  if (slot != nullptr) {
    __atomic_fetch_add(&slot[offset / sizeof(uint64_t)], static_cast<uint64_t>(delta),
                       __ATOMIC_RELAXED);
  }
}

}  // namespace

void Progress() { AddWord(kProgressCounterOffset, 1); }

bool ProgressEnabled() { return Slot() != nullptr; }

ProgressWaiting::ProgressWaiting() { AddWord(kProgressWaitingOffset, 1); }

ProgressWaiting::~ProgressWaiting() { AddWord(kProgressWaitingOffset, -1); }

}  // namespace dgt::worker
