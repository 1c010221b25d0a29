#include "cli/display_width.h"

#include <locale.h>

#include <cwchar>

#include "absl/strings/str_format.h"

namespace dgt::cli {
namespace {

// glibc's C.UTF-8 locale, made once; null where the machine has none.
locale_t Utf8Locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", nullptr);
  return locale;
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  const locale_t utf8 = Utf8Locale();
  if (utf8 == nullptr) return text.size();
  // mbrtowc and wcwidth read the calling thread's locale: switch it for the count only.
  const locale_t previous = uselocale(utf8);
  size_t width = 0;
  std::mbstate_t state{};
  for (size_t i = 0; i < text.size();) {
    wchar_t c = 0;
    const size_t n = std::mbrtowc(&c, text.data() + i, text.size() - i, &state);
    if (n == static_cast<size_t>(-1) || n == static_cast<size_t>(-2)) {
      // Not UTF-8 (or cut short): a column for the byte, then decode afresh.
      state = std::mbstate_t{};
      ++width;
      ++i;
      continue;
    }
    i += n == 0 ? 1 : n;  // n == 0: a NUL byte.
    const int w = wcwidth(c);
    width += w < 0 ? 1 : static_cast<size_t>(w);
  }
  uselocale(previous);
  return width;
}

std::string TerminalText(absl::string_view text, absl::string_view keep) {
  const locale_t utf8 = Utf8Locale();
  std::string out;
  out.reserve(text.size());
  const locale_t previous = utf8 == nullptr ? nullptr : uselocale(utf8);
  std::mbstate_t state{};
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      const bool control = byte < 0x20 || byte == 0x7F;
      if (control && keep.find(static_cast<char>(byte)) == absl::string_view::npos) {
        absl::StrAppendFormat(&out, "\\x%02x", byte);
      } else {
        out.push_back(static_cast<char>(byte));
      }
      ++i;
      continue;
    }
    wchar_t c = 0;
    const size_t n = utf8 == nullptr ? static_cast<size_t>(-1)
                                     : std::mbrtowc(&c, text.data() + i, text.size() - i, &state);
    if (n == static_cast<size_t>(-1) || n == static_cast<size_t>(-2) || n == 0) {
      state = std::mbstate_t{};
      absl::StrAppendFormat(&out, "\\x%02x", byte);
      ++i;
      continue;
    }
    const wchar_t u = c;  // A code point (glibc's wchar_t is UTF-32).
    const bool hidden = (u >= 0x80 && u <= 0x9F) || u == 0x200E || u == 0x200F ||
                        (u >= 0x202A && u <= 0x202E) || (u >= 0x2066 && u <= 0x2069);
    if (hidden) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned>(u));
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  if (previous != nullptr) uselocale(previous);
  return out;
}

std::string PadRight(absl::string_view text, size_t width) {
  std::string out(text);
  const size_t have = DisplayWidth(text);
  if (have < width) out.append(width - have, ' ');
  return out;
}

}  // namespace dgt::cli
