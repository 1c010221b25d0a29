// Well-formed UTF-8 (RFC 3629), as protobuf checks a string field before it is sent: job files,
// health reasons and the ids dgt-run sends to the rendezvous service are checked with it, so
// that text protobuf would refuse is named where it enters and not lost in a failed RPC.
//
// Thread-safe: pure functions.
#ifndef DGT_COMMON_UTF8_H_
#define DGT_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace dgt {

// The length of the UTF-8 sequence at the start of `text` (1 to 4 bytes), or 0 when `text` is
// empty or does not start with one: no overlong form, no UTF-16 surrogate, nothing above
// U+10FFFF.
size_t Utf8SequenceLength(absl::string_view text);

// The offset of the first byte of `text` that does not start a valid UTF-8 sequence, or
// absl::string_view::npos when all of `text` is valid UTF-8.
size_t FirstInvalidUtf8(absl::string_view text);

}  // namespace dgt

#endif  // DGT_COMMON_UTF8_H_
