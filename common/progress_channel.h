// The progress channel between a worker and its agent (docs/RECOVERY.md "Hang detection"): the
// agent makes one small file per launch, mapped shared, with one kProgressSlotBytes slot per
// local rank, and tells each worker its file and slot in the environment. A worker's progress
// report is one store to its slot's counter: no syscall, no store round-trip. The agent reads
// the slots on its own loop.
//
// Slot layout (little-endian 64-bit words, each written by one side only):
//   word 0  counter      the worker adds 1 per progress report (dgt.progress(),
//                        dgt::worker::Progress()).
//   word 1  waiting      > 0 while the worker is blocked on its peers (a collective, a recovery);
//                        the time spent so is not silence.
//   word 2  stacks       the pid of the process that registered the stack dump on
//                        kStacksSignalEnv's signal (Python's faulthandler, through the dgt
//                        package); 0 before. It may be a child of the worker's own process (a
//                        shell wrapper's Python): the agent signals this pid, never a process
//                        that did not register.
// The agent zeroes a slot before it starts the slot's process. Python mirrors these names in
// python/dgt/progress.py; tests/common/progress_channel_test.cc pins both.
//
// Constants only; thread-safe.
#ifndef DGT_COMMON_PROGRESS_CHANNEL_H_
#define DGT_COMMON_PROGRESS_CHANNEL_H_

#include <cstddef>

namespace dgt {

// The file's path and the worker's slot index (its local rank).
inline constexpr char kProgressFileEnv[] = "DGT_PROGRESS_FILE";
inline constexpr char kProgressSlotEnv[] = "DGT_PROGRESS_SLOT";
// The signal number on which the worker writes every thread's stack to kStacksFileEnv's file.
inline constexpr char kStacksSignalEnv[] = "DGT_STACKS_SIGNAL";
inline constexpr char kStacksFileEnv[] = "DGT_STACKS_FILE";

// One cache line per slot, so that ranks do not share a line.
inline constexpr size_t kProgressSlotBytes = 64;
inline constexpr size_t kProgressCounterOffset = 0;
inline constexpr size_t kProgressWaitingOffset = 8;
inline constexpr size_t kProgressStacksOffset = 16;

// The stack dump's signal: SIGRTMIN + this (a real-time signal, so that SIGUSR1 and SIGUSR2
// stay the user's).
inline constexpr int kStacksSignalOffset = 6;

}  // namespace dgt

#endif  // DGT_COMMON_PROGRESS_CHANNEL_H_
