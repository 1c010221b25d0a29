// The width of text on a terminal, for the columns of dgt's tables (`dgt jobs`, `dgt nodes`):
// padding by bytes pushes a column out of line after a name that is not ASCII.
//
// Thread-safety: pure functions, thread-safe.
#ifndef DGT_CLI_DISPLAY_WIDTH_H_
#define DGT_CLI_DISPLAY_WIDTH_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace dgt::cli {

// Terminal columns of `text` read as UTF-8, as glibc's wcwidth() in its C.UTF-8 locale counts
// them: 2 for each East Asian wide or fullwidth character (CJK, Hangul, fullwidth forms, most
// emoji), 0 for combining marks and zero-width characters, 1 for every other character, for a
// control character and for each byte that is not valid UTF-8. Without a C.UTF-8 locale on the
// machine, one column a byte.
size_t DisplayWidth(absl::string_view text);

// `text` safe to print on a terminal: every control character (C0 but `keep`'s, DEL, C1), every
// bidirectional-formatting character (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and every
// byte that is not valid UTF-8 is written as an escape (\xNN for a byte, \uXXXX for a
// character), so that a user's job name or reason cannot move the cursor, recolour the terminal,
// reverse the line or add a fake table row. `keep`: control characters left as they are (e.g.
// "\n\t" for a multi-line command).
std::string TerminalText(absl::string_view text, absl::string_view keep = "");

// `text` followed by spaces up to `width` columns (DisplayWidth); unchanged when already as wide.
std::string PadRight(absl::string_view text, size_t width);

}  // namespace dgt::cli

#endif  // DGT_CLI_DISPLAY_WIDTH_H_
