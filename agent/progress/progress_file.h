// ProgressFile: the agent's side of the progress channel (common/progress_channel.h): a file of
// one kProgressSlotBytes slot per local rank, mapped shared, that the workers map too and write
// their progress into. The agent only zeroes a slot before its process starts and reads it.
//
// Thread-compatible; the workers write concurrently (word-sized atomic loads and stores).
#ifndef DGT_AGENT_PROGRESS_PROGRESS_FILE_H_
#define DGT_AGENT_PROGRESS_PROGRESS_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "agent/progress/hang_detector.h"

namespace dgt::agent {

class ProgressFile {
 public:
  // Creates `path` (truncated, mode 0600) with `slots` zeroed slots and maps it.
  // Errors: InvalidArgument for slots < 1; as open(2), ftruncate(2), mmap(2), naming the path.
  static absl::StatusOr<std::unique_ptr<ProgressFile>> Create(const std::string& path, int slots);
  // Unmaps and removes the file.
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;

  const std::string& path() const { return path_; }
  int slots() const { return slots_; }

  // Zeroes slot `slot` (before its next process starts). Out-of-range slots are ignored.
  void Reset(int slot);
  // The slot's counter and waiting words; zeros for an out-of-range slot.
  ProgressSample Read(int slot) const;
  // The pid that registered the slot's stack dump (the stacks word): the worker, or a process it
  // started (a shell wrapper's Python). 0 when none did, or for an out-of-range slot.
  pid_t StacksPid(int slot) const;

 private:
  ProgressFile(std::string path, int slots, uint64_t* words);
  uint64_t Load(int slot, size_t offset) const;

  const std::string path_;
  const int slots_;
  uint64_t* const words_;  // The mapping: slots_ * kProgressSlotBytes bytes.
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_PROGRESS_PROGRESS_FILE_H_
