#include "agent/workers/log_line_prefix.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dgt::agent {
namespace {

// Python's Template identifier: [_a-z][_a-z0-9]*, ASCII, any case.
bool IdStart(char c) { return c == '_' || absl::ascii_isalpha(static_cast<unsigned char>(c)); }
bool IdChar(char c) { return c == '_' || absl::ascii_isalnum(static_cast<unsigned char>(c)); }

}  // namespace

std::string ExpandLogLinePrefix(absl::string_view tmpl, absl::string_view role_name, int rank,
                                int local_rank) {
  // Lookups are case-sensitive, as a Python dict's: ${RANK} stays as written.
  auto value = [&](absl::string_view name, std::string* out) {
    if (name == "role_name") {
      *out = std::string(role_name);
    } else if (name == "rank") {
      *out = absl::StrCat(rank);
    } else if (name == "local_rank") {
      *out = absl::StrCat(local_rank);
    } else {
      return false;
    }
    return true;
  };
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t dollar = tmpl.find('$', i);
    if (dollar == absl::string_view::npos) {
      absl::StrAppend(&out, tmpl.substr(i));
      break;
    }
    absl::StrAppend(&out, tmpl.substr(i, dollar - i));
    const size_t next = dollar + 1;
    if (next < tmpl.size() && tmpl[next] == '$') {  // "$$": a literal '$'.
      out.push_back('$');
      i = next + 1;
      continue;
    }
    const bool braced = next < tmpl.size() && tmpl[next] == '{';
    const size_t id_start = braced ? next + 1 : next;
    size_t id_end = id_start;
    if (id_end < tmpl.size() && IdStart(tmpl[id_end])) {
      while (id_end < tmpl.size() && IdChar(tmpl[id_end])) ++id_end;
    }
    const bool closed = !braced || (id_end < tmpl.size() && tmpl[id_end] == '}');
    if (id_end == id_start || !closed) {  // Not a placeholder: the '$' stays.
      out.push_back('$');
      i = next;
      continue;
    }
    const size_t end = braced ? id_end + 1 : id_end;
    std::string substituted;
    if (value(tmpl.substr(id_start, id_end - id_start), &substituted)) {
      absl::StrAppend(&out, substituted);
    } else {
      absl::StrAppend(&out, tmpl.substr(dollar, end - dollar));  // Unknown: left as written.
    }
    i = end;
  }
  return out;
}

std::string LogLinePrefix(absl::string_view tmpl, absl::string_view role_name, int rank,
                          int local_rank) {
  if (tmpl.empty()) return absl::StrCat("[rank", rank, "]: ");
  return ExpandLogLinePrefix(tmpl, role_name, rank, local_rank);
}

}  // namespace dgt::agent
