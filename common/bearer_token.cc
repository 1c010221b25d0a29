#include "common/bearer_token.h"

#include "absl/strings/str_cat.h"

namespace dgt {

std::string BearerValue(absl::string_view token) { return absl::StrCat("Bearer ", token); }

bool TokenMatches(absl::string_view received_value, absl::string_view token) {
  const std::string expected = BearerValue(token);
  unsigned char diff = received_value.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char r = i < received_value.size() ? received_value[i] : 0;
    diff |= static_cast<unsigned char>(r ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace dgt
