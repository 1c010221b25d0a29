// Progress reports to dgt-run's hang detection (docs/RECOVERY.md "Hang detection"), for C++
// trainers: the same channel as Python's dgt.progress(). dgt-run passes a shared-memory slot in
// the environment (DGT_PROGRESS_FILE, DGT_PROGRESS_SLOT); a report is one atomic add to it, no
// system call. Without those variables every call is a no-op.
//
// Thread-safe. The slot is mapped at the first call (once per process).
#ifndef DGT_WORKER_PROGRESS_H_
#define DGT_WORKER_PROGRESS_H_

namespace dgt::worker {

// One progress report: the training loop moved on (call it once per step).
void Progress();

// Whether dgt-run gave this process a progress slot.
bool ProgressEnabled();

// Marks a wait on the peers (a collective, a recovery) for its lifetime: not silence, so a rank
// blocked on a hung peer is not taken for hung. Nests.
class ProgressWaiting {
 public:
  ProgressWaiting();
  ~ProgressWaiting();
  ProgressWaiting(const ProgressWaiting&) = delete;
  ProgressWaiting& operator=(const ProgressWaiting&) = delete;
};

}  // namespace dgt::worker

#endif  // DGT_WORKER_PROGRESS_H_
