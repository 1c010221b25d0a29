#include "cli/display_width.h"

#include <cstdint>

namespace dgt::cli {
namespace {

struct Range {
  char32_t first;
  char32_t last;
};

// Combining marks and zero-width characters (Unicode's Mn/Me blocks most met in names, and the
// zero-width formatting characters).
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A}, {0x064B, 0x065F},
    {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
    {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064}, {0x20D0, 0x20FF}, {0xFE00, 0xFE0F},
    {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF},
};

// East Asian Wide and Fullwidth (Unicode's EastAsianWidth W and F), and the emoji blocks.
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},   {0x3400, 0x4DBF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},
    {0xFFE0, 0xFFE6},   {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF}, {0x1F900, 0x1F9FF},
    {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

template <size_t N>
bool In(const Range (&ranges)[N], char32_t c) {
  for (const Range& r : ranges) {
    if (c >= r.first && c <= r.last) return true;
  }
  return false;
}

// Decodes the UTF-8 character at text[*i] and advances *i past it; false (advancing one byte)
// for a byte that does not start a valid, shortest-form sequence.
bool Decode(absl::string_view text, size_t* i, char32_t* out) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(*i);
  if (lead < 0x80) {
    *out = lead;
    ++*i;
    return true;
  }
  // The sequence's length, the lead byte's payload, and the smallest character of that length.
  size_t len = 0;
  char32_t c = 0;
  char32_t smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    len = 2;
    c = lead & 0x1Fu;
    smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
    c = lead & 0x0Fu;
    smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4;
    c = lead & 0x07u;
    smallest = 0x10000;
  }
  bool valid = len > 0 && *i + len <= text.size();
  for (size_t k = 1; valid && k < len; ++k) {
    valid = (byte(*i + k) & 0xC0) == 0x80;
    c = (c << 6) | (byte(*i + k) & 0x3Fu);
  }
  valid = valid && c >= smallest && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
  *i += valid ? len : 1;
  *out = c;
  return valid;
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    char32_t c = 0;
    if (!Decode(text, &i, &c)) {
      ++width;
    } else if (In(kZeroWidth, c)) {
      continue;
    } else {
      width += In(kWide, c) ? 2 : 1;
    }
  }
  return width;
}

std::string PadRight(absl::string_view text, size_t width) {
  std::string out(text);
  const size_t have = DisplayWidth(text);
  if (have < width) out.append(width - have, ' ');
  return out;
}

}  // namespace dgt::cli
