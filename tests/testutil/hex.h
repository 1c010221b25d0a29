// Hex helpers for byte-level protocol tests.
#ifndef DGT_TESTS_TESTUTIL_HEX_H_
#define DGT_TESTS_TESTUTIL_HEX_H_

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace dgt::testing {

inline std::string Unhex(absl::string_view hex) { return absl::HexStringToBytes(hex); }
inline std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

}  // namespace dgt::testing

#endif  // DGT_TESTS_TESTUTIL_HEX_H_
