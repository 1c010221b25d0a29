#include "agent/health/health_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flag_parse.h"
#include "common/signal_name.h"
#include "common/utf8.h"

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

namespace {

// `text` with control bytes (but those `keep` allows) and bytes outside well-formed UTF-8 as
// \xNN, cut after `max_bytes` at a character's start ("..." then added).
template <typename Keep>
std::string EscapeText(std::string_view text, size_t max_bytes, Keep keep) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(absl::string_view(text.data(), text.size()));
    const auto byte = static_cast<unsigned char>(text[0]);
    const bool escape = n == 0 || (n == 1 && (byte < 0x20 || byte == 0x7F) && !keep(text[0]));
    const size_t width = escape ? 4 : n;
    if (out.size() + width > max_bytes) {
      out += "...";
      break;
    }
    if (escape) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
      text.remove_prefix(1);
    } else {
      out.append(text.substr(0, n));
      text.remove_prefix(n);
    }
  }
  return out;
}

}  // namespace

std::string OneLineReason(std::string_view text, size_t max_bytes) {
  return EscapeText(text, max_bytes, [](char) { return false; });
}

std::string OutputTail::Text() const {
  std::string kept = ring_.substr(start_) + ring_.substr(0, start_);
  absl::StripTrailingAsciiWhitespace(&kept);
  // Control bytes (NUL included: it would end the printed reason) and bytes that are not
  // UTF-8 become \xNN, so that a check's output can neither cut its reason short, nor drive the
  // terminal, nor make a protobuf string that cannot be sent; newlines and tabs stay.
  std::string text =
      EscapeText(kept, std::string::npos, [](char c) { return c == '\n' || c == '\t'; });
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
