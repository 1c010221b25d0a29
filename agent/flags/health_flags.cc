#include "agent/flags/health_flags.h"

#include <cmath>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/flag_parse.h"

namespace dgt::agent {
namespace {

constexpr uint64_t kMaxByteSize = uint64_t{1} << 60;

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view flag, absl::string_view text) {
  const absl::Status bad = Bad(absl::StrCat(
      flag, " must be a size (bytes, or with K, M, G, T), at most 1048576T, got '", text, "'"));
  if (text.empty()) return bad;
  int shift = 0;
  switch (absl::ascii_toupper(text.back())) {
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  absl::string_view number = shift != 0 ? text.substr(0, text.size() - 1) : text;
  if (number.empty() || !absl::ascii_isdigit(number.front())) return bad;
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value) || value < 0) return bad;
  const double bytes = std::ldexp(value, shift);
  if (bytes > static_cast<double>(kMaxByteSize)) return bad;
  return static_cast<uint64_t>(bytes);
}

void AddHealthFlags(CLI::App& app, RawHealthFlags* raw) {
  const std::string kGroup = "Node health checks";
  app.add_option("--health-check,--health_check", raw->commands,
                 "A command (/bin/sh -c) that checks this node: exit 0 is healthy, else its "
                 "output is the reason; repeatable")
      ->group(kGroup)
      // One command per flag (CLI11's vectors otherwise take every following argument, the
      // script included); repeated flags add up.
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("CMD");
  app.add_option("--health-interval,--health_interval", raw->interval,
                 "Seconds between rounds of checks while the node runs (0: only before the "
                 "join; default 60)")
      ->group(kGroup)
      ->type_name("SECONDS");
  app.add_option("--health-check-timeout,--health_check_timeout", raw->check_timeout,
                 "The longest one --health-check may run before it is killed and fails "
                 "(default 60)")
      ->group(kGroup)
      ->type_name("SECONDS");
  app.add_option("--expected-gpus,--expected_gpus", raw->expected_gpus,
                 "GPUs (/dev/nvidiaN) this node must have (default: not checked)")
      ->group(kGroup)
      ->type_name("INT");
  app.add_option("--min-free-disk,--min_free_disk", raw->min_free_disk,
                 "Free space the log dir and the work dir need, bytes or K/M/G/T (default 0: "
                 "not checked)")
      ->group(kGroup)
      ->type_name("SIZE");
  app.add_option("--min-shm-size,--min_shm_size", raw->min_shm_size,
                 "The least size of /dev/shm, which must be writable (default 64M)")
      ->group(kGroup)
      ->type_name("SIZE");
}

absl::Status ParseHealthFlags(const RawHealthFlags& raw, HealthFlags* out) {
  for (const std::string& c : raw.commands) {
    if (absl::StripAsciiWhitespace(c).empty()) {
      return Bad("--health-check needs a command, got an empty one");
    }
  }
  out->commands = raw.commands;
  auto interval =
      ParseDuration("--health-interval", raw.interval, absl::ZeroDuration(), kMaxFlagDuration);
  if (!interval.ok()) return interval.status();
  if (*interval > absl::ZeroDuration() && *interval < kMinHealthPeriod) {
    return Bad(absl::StrCat("--health-interval must be 0 (only before the join) or at least ",
                            FormatFlagSeconds(kMinHealthPeriod), " seconds, got '", raw.interval,
                            "'"));
  }
  out->interval_s = absl::ToDoubleSeconds(*interval);
  auto timeout = ParseDuration("--health-check-timeout", raw.check_timeout, kMinHealthPeriod,
                               kMaxFlagDuration);
  if (!timeout.ok()) return timeout.status();
  out->check_timeout_s = absl::ToDoubleSeconds(*timeout);
  if (!raw.expected_gpus.empty()) {
    auto n = ParseInt64("--expected-gpus", raw.expected_gpus, 0, kMaxGpus);
    if (!n.ok()) return n.status();
    out->expected_gpus = static_cast<int>(*n);
  }
  auto disk = ParseByteSize("--min-free-disk", raw.min_free_disk);
  if (!disk.ok()) return disk.status();
  out->min_free_disk = *disk;
  auto shm = ParseByteSize("--min-shm-size", raw.min_shm_size);
  if (!shm.ok()) return shm.status();
  out->min_shm_size = *shm;
  return absl::OkStatus();
}

}  // namespace dgt::agent
