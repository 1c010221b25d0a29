// HangDetector: which of this node's workers are hung, from readings of their progress slots
// (common/progress_channel.h) on the agent's loop. Pure: readings and `now` in, verdicts out; the
// runtime (agent/progress/hang_monitor.h) reads the slots, kills and reports. Unit-tested on a
// simulated clock (tests/agent/hang_detector_test.cc).
//
// Two timeouts, NVRx's shape (a long one for the first beat, a short one after it), each off at 0:
//   first_progress_timeout  from the process's start until its first progress report;
//   hang_timeout            from its last progress report.
// Silence is time neither reporting nor waiting: a worker that says it is blocked on its peers
// (a collective, a recovery; the slot's waiting word) is not silent, since its own collective
// timeout bounds that wait and the hung peer's kill releases it. A stopped process (SIGSTOP,
// `stopped` reads /proc) is silent even while it waits. A worker that never reports is never
// declared hung by hang_timeout alone: only first_progress_timeout covers the time before the
// first report (a script that does not report at all must not be killed for it).
//
// Thread-compatible.
#ifndef DGT_AGENT_PROGRESS_HANG_DETECTOR_H_
#define DGT_AGENT_PROGRESS_HANG_DETECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace dgt::agent {

// One reading of a worker's slot.
struct ProgressSample {
  uint64_t counter = 0;  // Reports so far (the slot is zeroed before the process starts).
  bool waiting = false;  // Blocked on its peers.
};

// A hung worker, as HangDetector::Check declares it.
struct Hang {
  int local_rank = 0;
  bool first = false;      // No report since its start (first_progress_timeout).
  absl::Duration silent;   // How long it has been silent.
  absl::Duration timeout;  // The timeout it ran past.
  uint64_t reports = 0;    // Reports it made.
  bool waiting = false;    // Its slot said it waits on its peers (so it is stopped).
  // "no progress report for 2.1 s (--hang-timeout=2), after 41 reports" or
  // "no progress report since its start, silent for 30.1 s (--first-progress-timeout=30)".
  std::string Describe() const;
};

// Whether `a` is blamed before `b` when one reading of the slots declares both hung: its peers
// blocked in a collective on a hung rank fall silent with it, and only one of them is the cause.
// The longest silent first, then one that does not say it waits on its peers, then the lower
// local rank. The first is the failure summary's root cause (agent/workers/node_workers.h).
bool BlameBefore(const Hang& a, const Hang& b);

class HangDetector {
 public:
  struct Options {
    absl::Duration first_progress_timeout = absl::ZeroDuration();  // Off at 0.
    absl::Duration hang_timeout = absl::ZeroDuration();            // Off at 0.
  };

  explicit HangDetector(Options options) : options_(options) {}

  // Whether either timeout is on.
  bool enabled() const;
  // How often the runtime reads the slots: a twentieth of the shorter timeout, from 5 ms to
  // 50 ms. A report is seen within a period, and a hang declared within the next one past the
  // timeout: within the timeout + 100 ms of the last report.
  absl::Duration PollPeriod() const;

  // Local rank `local_rank`'s process started at `now`, its slot zeroed. Replaces what was known
  // of the rank.
  void Watch(int local_rank, absl::Time now);
  // Its process is gone: no verdict on it any more.
  void Forget(int local_rank);
  bool watching(int local_rank) const { return ranks_.count(local_rank) > 0; }

  // A reading `sample` of `local_rank`'s slot at `now`. Returns the Hang once the rank is silent
  // past its timeout; the rank is then forgotten (declared once). `stopped` says whether the
  // process is stopped; it is asked only while the rank waits. Unwatched ranks: nullopt.
  std::optional<Hang> Check(int local_rank, const ProgressSample& sample, absl::Time now,
                            const std::function<bool()>& stopped);

 private:
  struct Rank {
    absl::Time started;
    uint64_t counter = 0;    // The last reading's.
    absl::Time quiet_since;  // The start, the last report seen or the last wait seen.
  };

  Options options_;
  std::map<int, Rank> ranks_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_PROGRESS_HANG_DETECTOR_H_
