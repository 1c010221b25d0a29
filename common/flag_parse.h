// One parsing layer for the numeric flags of every dgt binary (dgt-run, dgt, dgt-rendezvous):
// durations in seconds and integers, each within a range, with errors that name the flag, the
// value and a readable bound. CLI11 alone takes "nan", "-5" into an unsigned, or "1e20" seconds,
// and its range messages print doubles with hundreds of digits.
#ifndef DGT_COMMON_FLAG_PARSE_H_
#define DGT_COMMON_FLAG_PARSE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dgt {

// The longest timeout any flag accepts: beyond a year a deadline is a typo, and far beyond it
// overflows deadline arithmetic (absl::Time, gRPC's int64 milliseconds, poll's int).
inline constexpr absl::Duration kMaxFlagDuration = absl::Hours(24 * 365);
// The smallest value of a flag that must be positive (a timeout of 0 would fail at once).
inline constexpr absl::Duration kMinPositiveFlagDuration = absl::Milliseconds(1);

// Parses `text` as a number of seconds ("30", "1.5", "2e3") within [min, max], both inclusive.
// Errors: InvalidArgument for text that is not a finite decimal number (nan, inf, "5s", empty)
// or is outside the range, e.g.
//   "--timeout must be a number of seconds from 0.001 to 31536000 (a year), got 'nan'".
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view flag, absl::string_view text,
                                             absl::Duration min, absl::Duration max);

// Parses `text` as a decimal integer within [min, max], both inclusive.
// Errors: InvalidArgument for anything else (fractions, overflow, trailing text), e.g.
//   "--node-rank must be an integer from 0 to 1000000, got '-5'".
absl::StatusOr<int64_t> ParseInt64(absl::string_view flag, absl::string_view text, int64_t min,
                                   int64_t max);

// A duration as flags take it: whole seconds without a fraction ("30"), else the shortest
// decimal ("0.001", "1.5"); a year is "31536000 (a year)".
std::string FormatFlagSeconds(absl::Duration d);

}  // namespace dgt

#endif  // DGT_COMMON_FLAG_PARSE_H_
