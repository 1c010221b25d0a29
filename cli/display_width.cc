#include "cli/display_width.h"

#include <locale.h>

#include <cwchar>

namespace dgt::cli {
namespace {

// glibc's C.UTF-8 locale, made once; null where the machine has none.
locale_t Utf8Locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return locale;
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  const locale_t utf8 = Utf8Locale();
  if (utf8 == static_cast<locale_t>(0)) return text.size();
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

std::string PadRight(absl::string_view text, size_t width) {
  std::string out(text);
  const size_t have = DisplayWidth(text);
  if (have < width) out.append(width - have, ' ');
  return out;
}

}  // namespace dgt::cli
