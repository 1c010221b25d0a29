#include "common/flag_parse.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dgt {

std::string FormatFlagSeconds(absl::Duration d) {
  if (d == kMaxFlagDuration) return absl::StrCat(absl::ToInt64Seconds(d), " (a year)");
  if (d % absl::Seconds(1) == absl::ZeroDuration()) return absl::StrCat(absl::ToInt64Seconds(d));
  // %g drops trailing zeros; 9 digits keep every nanosecond of a sub-second bound.
  return absl::StrFormat("%.9g", absl::ToDoubleSeconds(d));
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view flag, absl::string_view text,
                                             absl::Duration min, absl::Duration max) {
  double seconds = 0;
  // A decimal number, as Python's float() in torchrun reads one: strtod's hexadecimal form
  // ("0x10", "0x1p-3"), which SimpleAtod takes too, is refused.
  const bool hex = absl::StrContains(text, 'x') || absl::StrContains(text, 'X');
  // Compared as doubles first: absl::Seconds() of a huge value saturates to infinity and of
  // nan is undefined, so only an in-range number becomes a Duration.
  if (!hex && absl::SimpleAtod(text, &seconds) && std::isfinite(seconds) &&
      seconds >= absl::ToDoubleSeconds(min) && seconds <= absl::ToDoubleSeconds(max)) {
    absl::Duration d = absl::Seconds(seconds);
    if (d >= min && d <= max) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be a number of seconds from ",
                                                 FormatFlagSeconds(min), " to ",
                                                 FormatFlagSeconds(max), ", got '", text, "'"));
}

absl::StatusOr<int64_t> ParseInt64(absl::string_view flag, absl::string_view text, int64_t min,
                                   int64_t max) {
  int64_t v = 0;
  // SimpleAtoi fails on overflow instead of clamping, and on fractions and trailing text.
  if (absl::SimpleAtoi(text, &v) && v >= min && v <= max) return v;
  std::string range;
  if (min == std::numeric_limits<int64_t>::min() && max == std::numeric_limits<int64_t>::max()) {
    range = "a 64-bit signed integer";
  } else if (max == std::numeric_limits<int64_t>::max()) {
    range = absl::StrCat("an integer >= ", min);
  } else {
    range = absl::StrCat("an integer from ", min, " to ", max);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be ", range, ", got '", text, "'"));
}

}  // namespace dgt
