#include "agent/health/health_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flag_parse.h"
#include "common/signal_name.h"

namespace dgt::agent {

void OutputTail::Append(std::string_view bytes) {
  total_ += bytes.size();
  if (cap_ == 0) return;
  if (bytes.size() >= cap_) {
    ring_.assign(bytes.substr(bytes.size() - cap_));
    start_ = 0;
    return;
  }
  if (ring_.size() < cap_) {
    const size_t room = cap_ - ring_.size();
    const size_t n = std::min(room, bytes.size());
    ring_.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  // Full: overwrite the oldest bytes.
  for (char c : bytes) {
    ring_[start_] = c;
    start_ = (start_ + 1) % cap_;
  }
}

std::string OutputTail::Text() const {
  std::string kept = ring_.substr(start_) + ring_.substr(0, start_);
  absl::StripTrailingAsciiWhitespace(&kept);
  // Control bytes (NUL included: it would end the printed reason) become \xNN, so that a check's
  // output can neither cut its reason short nor drive the terminal; newlines and tabs stay.
  std::string text;
  text.reserve(kept.size());
  for (const char c : kept) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7F) {
      absl::StrAppendFormat(&text, "\\x%02x", byte);
    } else {
      text.push_back(c);
    }
  }
  if (!cut()) return text;
  return absl::StrCat("[output cut: the last ", ring_.size(), " of ", total_, " bytes] ", text);
}

HealthResult CommandVerdict(const CommandEnd& end, absl::Duration timeout) {
  const std::string output = end.output.empty() ? "(no output)" : end.output;
  if (end.timed_out) {
    return {false, absl::StrCat("did not finish within ", FormatFlagSeconds(timeout),
                                " s (--health-check-timeout); killed: ", output)};
  }
  if (end.signal != 0) {
    return {false, absl::StrCat("killed by ", SignalName(end.signal), ": ", output)};
  }
  if (end.exit_code != 0) {
    return {false, absl::StrCat("exited with code ", end.exit_code, ": ", output)};
  }
  return {true, end.output};
}

std::optional<std::string> RoundVerdict(const std::vector<NamedResult>& results) {
  for (const NamedResult& r : results) {
    if (!r.result.healthy) {
      return absl::StrCat("health check '", r.name, "' failed: ", r.result.reason);
    }
  }
  return std::nullopt;
}

void HealthSchedule::Started(absl::Time now) {
  running_ = true;
  last_start_ = now;
}

void HealthSchedule::Finished(absl::Time now) {
  running_ = false;
  last_end_ = now;
}

std::optional<absl::Time> HealthSchedule::NextRun() const {
  if (!periodic() || running_ || !last_start_) return std::nullopt;
  absl::Time next = *last_start_ + interval_;
  if (last_end_ && *last_end_ > next) next = *last_end_;
  return next;
}

bool HealthSchedule::Due(absl::Time now) const {
  std::optional<absl::Time> next = NextRun();
  return next && now >= *next;
}

}  // namespace dgt::agent
