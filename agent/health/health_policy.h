// The pure decisions of node health checks (docs/RECOVERY.md "Node health checks"): how much of a
// user check's output is kept (OutputTail), what a command's end means (CommandVerdict), what a
// round of checks means for the node (RoundVerdict), and when the next round is due
// (HealthSchedule). No I/O and no clock of their own; tests/agent/health_policy_test.cc drives
// them on a simulated clock.
//
// Thread-compatible.
#ifndef DGT_AGENT_HEALTH_HEALTH_POLICY_H_
#define DGT_AGENT_HEALTH_HEALTH_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "agent/health/health_check.h"

namespace dgt::agent {

// The most of a user check's output (stdout and stderr together) kept as its reason.
inline constexpr size_t kHealthOutputCap = 4096;

// The last `cap` bytes of a stream of any length, in memory of at most `cap` bytes.
class OutputTail {
 public:
  explicit OutputTail(size_t cap = kHealthOutputCap) : cap_(cap) {}
  void Append(std::string_view bytes);
  // Bytes appended so far.
  uint64_t total() const { return total_; }
  bool cut() const { return total_ > cap_; }
  // The kept bytes, oldest first, trailing whitespace removed, control bytes other than newline
  // and tab (NUL, ESC, DEL, ...) and bytes that are not well-formed UTF-8 (a character the cut
  // split, Latin-1 text) written as \xNN; when bytes were dropped, prefixed with
  // "[output cut: the last 4096 of 1048576 bytes] ".
  std::string Text() const;

 private:
  size_t cap_;
  uint64_t total_ = 0;
  std::string ring_;  // At most cap_ bytes; once full, `start_` is the oldest.
  size_t start_ = 0;
};

// The most bytes of a health reason a node sends to the jobs service (OneLineReason).
inline constexpr size_t kHealthReasonCap = 1024;

// `text` as one line of valid UTF-8 for a log line or a protobuf string field: control bytes
// (newline and tab included), DEL and every byte that is not part of a well-formed UTF-8
// character become \xNN; cut to at most `max_bytes` at a character's start, then "..." added.
std::string OneLineReason(std::string_view text, size_t max_bytes = kHealthReasonCap);

// How a user check's process ended.
struct CommandEnd {
  bool timed_out = false;  // Killed at its deadline.
  int exit_code = 0;       // When it exited.
  int signal = 0;          // When a signal ended it (and it did not time out).
  std::string output;      // OutputTail::Text().
};

// Exit 0 is healthy; anything else is unhealthy with the output as the reason:
//   "exited with code 3: GPU 2 fell off the bus"
//   "killed by SIGSEGV: <output>"
//   "did not finish within 30 s (--health-check-timeout); killed: <output>"
// An empty output reads "(no output)".
HealthResult CommandVerdict(const CommandEnd& end, absl::Duration timeout);

// One check's result in a round.
struct NamedResult {
  std::string name;
  HealthResult result;
};

// The first unhealthy result of a round, as the message dgt-run prints and exits with:
// "health check 'NAME' failed: REASON". nullopt when every check is healthy.
std::optional<std::string> RoundVerdict(const std::vector<NamedResult>& results);

// When the next round of checks is due. A round starts every `interval` from the previous
// round's start; a round that runs longer than the interval is followed by the next one at its
// end (rounds never overlap). An interval of 0: no round after the one before the join.
class HealthSchedule {
 public:
  explicit HealthSchedule(absl::Duration interval) : interval_(interval) {}
  bool periodic() const { return interval_ > absl::ZeroDuration(); }
  // A round started at `now`.
  void Started(absl::Time now);
  // The round ended at `now`.
  void Finished(absl::Time now);
  bool running() const { return running_; }
  // When the next round is due: nullopt while one runs, or when not periodic, or before the
  // first round started.
  std::optional<absl::Time> NextRun() const;
  bool Due(absl::Time now) const;

 private:
  absl::Duration interval_;
  bool running_ = false;
  std::optional<absl::Time> last_start_;
  std::optional<absl::Time> last_end_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_HEALTH_HEALTH_POLICY_H_
