#include "agent/progress/hang_detector.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flag_parse.h"

namespace dgt::agent {
namespace {

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

}  // namespace

std::string Hang::Describe() const {
  if (first) {
    return absl::StrCat("no progress report since its start, silent for ", Seconds(silent),
                        " (--first-progress-timeout=", FormatFlagSeconds(timeout), ")");
  }
  return absl::StrCat("no progress report for ", Seconds(silent),
                      " (--hang-timeout=", FormatFlagSeconds(timeout), "), after ", reports,
                      reports == 1 ? " report" : " reports");
}

bool BlameBefore(const Hang& a, const Hang& b) {
  if (a.silent != b.silent) return a.silent > b.silent;
  if (a.waiting != b.waiting) return !a.waiting;
  return a.local_rank < b.local_rank;
}

bool HangDetector::enabled() const {
  return options_.first_progress_timeout > absl::ZeroDuration() ||
         options_.hang_timeout > absl::ZeroDuration();
}

absl::Duration HangDetector::PollPeriod() const {
  absl::Duration shortest = absl::InfiniteDuration();
  for (absl::Duration t : {options_.first_progress_timeout, options_.hang_timeout}) {
    if (t > absl::ZeroDuration()) shortest = std::min(shortest, t);
  }
  return std::clamp(shortest / 20, absl::Milliseconds(5), absl::Milliseconds(50));
}

void HangDetector::Watch(int local_rank, absl::Time now) { ranks_[local_rank] = Rank{now, 0, now}; }

void HangDetector::Forget(int local_rank) { ranks_.erase(local_rank); }

std::optional<Hang> HangDetector::Check(int local_rank, const ProgressSample& sample,
                                        absl::Time now, const std::function<bool()>& stopped) {
  auto it = ranks_.find(local_rank);
  if (it == ranks_.end()) return std::nullopt;
  Rank& r = it->second;
  if (sample.counter != r.counter) {
    r.counter = sample.counter;
    r.quiet_since = now;
    return std::nullopt;
  }
  if (sample.waiting && !stopped()) {
    r.quiet_since = now;
    return std::nullopt;
  }
  const bool first = r.counter == 0;
  const absl::Duration timeout = first ? options_.first_progress_timeout : options_.hang_timeout;
  if (timeout <= absl::ZeroDuration() || now - r.quiet_since <= timeout) return std::nullopt;
  Hang h;
  h.local_rank = local_rank;
  h.first = first;
  // Before the first report, the window counts from the start (or the last wait).
  h.silent = now - r.quiet_since;
  h.timeout = timeout;
  h.reports = r.counter;
  h.waiting = sample.waiting;
  ranks_.erase(it);
  return h;
}

}  // namespace dgt::agent
