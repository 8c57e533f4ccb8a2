// SPDX-License-Identifier: Apache-2.0
#pragma once
// UTF-8 and the few Unicode properties the tokenizer pipeline needs (utf8proc underneath):
// decoding, validation, lossy repair of byte strings, normalization forms, lowercase, and the
// character classes of Rust's `char` that Hugging Face's components use (White_Space, numeric,
// punctuation, regex word characters). All functions are pure and thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zeroshard::text::detail {

// The code point starting at s[i] (s valid UTF-8); advances i past it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

// Bytes of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
inline size_t utf8_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void append_utf8(std::string& out, char32_t cp);

// Offset of the first byte that is not part of well-formed UTF-8, or npos when all of it is.
size_t find_invalid_utf8(std::string_view s);

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (as Rust's
// String::from_utf8_lossy and WHATWG's decoder do).
std::string utf8_lossy(std::string_view bytes);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
std::string normalize(std::string_view s, NormalForm form);

// Full lowercase mapping as Rust's str::to_lowercase: İ becomes "i̇" and a final capital sigma ς.
std::string to_lowercase(std::string_view s);

bool is_white_space(char32_t cp);  // Unicode White_Space (Rust's char::is_whitespace)
bool is_numeric(char32_t cp);      // general category N* (Rust's char::is_numeric)
bool is_punctuation(char32_t cp);  // ASCII punctuation or general category P*
bool is_word_char(char32_t cp);    // regex \w: Alphabetic, marks, decimal digits, connectors
bool is_mark(char32_t cp);     // general category M* (Mn, Mc, Me)

}  // namespace zeroshard::text::detail
