#include "agent/flags/hostlist.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dgt::agent {
namespace {

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// The numbers of one bracket group's body ("01-04,07"), as text with their width kept.
absl::Status ExpandGroup(absl::string_view body, const std::string& bad,
                         std::vector<std::string>* out) {
  if (body.empty()) return absl::InvalidArgumentError(absl::StrCat(bad, ": empty brackets"));
  for (absl::string_view item : absl::StrSplit(body, ',')) {
    std::pair<absl::string_view, absl::string_view> range = absl::StrSplit(item, '-');
    absl::string_view lo_text = range.first;
    absl::string_view hi_text = item.find('-') == absl::string_view::npos ? lo_text : range.second;
    if (!AllDigits(lo_text) || !AllDigits(hi_text) || item.find('-') != item.rfind('-')) {
      return absl::InvalidArgumentError(
          absl::StrCat(bad, ": '", item, "' is not a number or a range N-M"));
    }
    uint64_t lo = 0;
    uint64_t hi = 0;
    if (lo_text.size() > 18 || hi_text.size() > 18 || !absl::SimpleAtoi(lo_text, &lo) ||
        !absl::SimpleAtoi(hi_text, &hi)) {
      return absl::InvalidArgumentError(absl::StrCat(bad, ": '", item, "' is too large"));
    }
    if (hi < lo) {
      return absl::InvalidArgumentError(
          absl::StrCat(bad, ": range '", item, "' ends below its start"));
    }
    if (hi - lo >= static_cast<uint64_t>(kMaxHostlistHosts) ||
        out->size() + (hi - lo) >= static_cast<size_t>(kMaxHostlistHosts)) {
      return absl::InvalidArgumentError(
          absl::StrCat(bad, ": more than ", kMaxHostlistHosts, " names"));
    }
    for (uint64_t n = lo; n <= hi; ++n) {
      std::string digits = absl::StrCat(n);
      if (digits.size() < lo_text.size()) {
        digits.insert(0, lo_text.size() - digits.size(), '0');
      }
      out->push_back(std::move(digits));
    }
  }
  return absl::OkStatus();
}

// One entry ("r[1-2]n[01-02]") appended to `hosts`.
absl::Status ExpandEntry(absl::string_view entry, const std::string& bad,
                         std::vector<std::string>* hosts) {
  if (entry.empty()) return absl::InvalidArgumentError(absl::StrCat(bad, ": an empty name"));
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < entry.size()) {
    const size_t open = entry.find('[', i);
    const size_t close_before = entry.find(']', i);
    if (close_before != absl::string_view::npos &&
        (open == absl::string_view::npos || close_before < open)) {
      return absl::InvalidArgumentError(absl::StrCat(bad, ": ']' without '['"));
    }
    const absl::string_view text =
        entry.substr(i, open == absl::string_view::npos ? absl::string_view::npos : open - i);
    for (std::string& n : names) absl::StrAppend(&n, text);
    if (open == absl::string_view::npos) break;
    const size_t close = entry.find(']', open);
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(bad, ": '[' without ']'"));
    }
    const absl::string_view body = entry.substr(open + 1, close - open - 1);
    if (body.find('[') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(bad, ": nested '['"));
    }
    std::vector<std::string> numbers;
    if (auto s = ExpandGroup(body, bad, &numbers); !s.ok()) return s;
    if (names.size() * numbers.size() + hosts->size() > static_cast<size_t>(kMaxHostlistHosts)) {
      return absl::InvalidArgumentError(
          absl::StrCat(bad, ": more than ", kMaxHostlistHosts, " names"));
    }
    std::vector<std::string> next;
    next.reserve(names.size() * numbers.size());
    for (const std::string& n : names) {
      for (const std::string& number : numbers) next.push_back(absl::StrCat(n, number));
    }
    names = std::move(next);
    i = close + 1;
  }
  for (std::string& n : names) hosts->push_back(std::move(n));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list,
                                                        absl::string_view what) {
  const std::string bad = absl::StrCat(what, "='", list, "' is not a Slurm hostlist");
  if (list.empty()) return absl::InvalidArgumentError(absl::StrCat(bad, ": it is empty"));
  for (char c : list) {
    if (absl::ascii_isspace(c) || !absl::ascii_isprint(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(bad, ": it holds a space or control character"));
    }
  }
  std::vector<std::string> hosts;
  // Split at the commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (depth < 0) return absl::InvalidArgumentError(absl::StrCat(bad, ": ']' without '['"));
    if (depth > 1) return absl::InvalidArgumentError(absl::StrCat(bad, ": nested '['"));
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (auto s = ExpandEntry(list.substr(start, i - start), bad, &hosts); !s.ok()) return s;
      start = i + 1;
    }
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandTaskCounts(absl::string_view list, absl::string_view what) {
  const std::string bad =
      absl::StrCat(what, "='", list, "' is not a Slurm task-count list such as 2(x3),1");
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    absl::string_view count = item;
    int repeat = 1;
    if (const size_t paren = item.find("(x"); paren != absl::string_view::npos) {
      count = item.substr(0, paren);
      absl::string_view times = item.substr(paren + 2);
      if (times.empty() || times.back() != ')' || !AllDigits(times.substr(0, times.size() - 1)) ||
          !absl::SimpleAtoi(times.substr(0, times.size() - 1), &repeat) || repeat < 1 ||
          repeat > kMaxHostlistHosts) {
        return absl::InvalidArgumentError(bad);
      }
    }
    int n = 0;
    if (!AllDigits(count) || !absl::SimpleAtoi(count, &n) ||
        counts.size() + repeat > static_cast<size_t>(kMaxHostlistHosts)) {
      return absl::InvalidArgumentError(bad);
    }
    counts.insert(counts.end(), repeat, n);
  }
  return counts;
}

}  // namespace dgt::agent
