// SPDX-License-Identifier: Apache-2.0
#include "byte_level.h"

#include <array>

#include "unicode.h"

namespace zeroshard::text::detail {

namespace {

struct Table {
  std::array<char32_t, 256> char_of{};
  std::array<std::string, 256> utf8_of{};
  Table() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char_of[b] = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(utf8_of[b], char_of[b]);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

void byte_level_encode(std::string_view bytes, std::string& out) {
  const Table& t = table();
  for (const char c : bytes) out += t.utf8_of[static_cast<unsigned char>(c)];
}

std::optional<uint8_t> byte_level_byte(char32_t cp) {
  // Printable bytes stand for themselves; the others were numbered from U+0100 in byte order.
  if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    return static_cast<uint8_t>(cp);
  }
  if (cp < 256 || cp >= 256 + 68) return std::nullopt;
  static const std::array<uint8_t, 68> byte_of = [] {
    std::array<uint8_t, 68> a{};
    const Table& t = table();
    for (int b = 0; b < 256; ++b) {
      if (t.char_of[b] >= 256) a[t.char_of[b] - 256] = static_cast<uint8_t>(b);
    }
    return a;
  }();
  return byte_of[cp - 256];
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b = byte_level_byte(next_code_point(text, i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace zeroshard::text::detail
