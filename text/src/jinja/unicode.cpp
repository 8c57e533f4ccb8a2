// SPDX-License-Identifier: Apache-2.0
#include "jinja/unicode.h"

#include <unicode/uchar.h>
#include <unicode/ucasemap.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/uversion.h>

#include <memory>

#include "zeroshard/base/error.h"

namespace zeroshard::text::jinja::unicode {
namespace {

// The byte length of the UTF-8 sequence at s[i], or 0 when it is not a valid one.
size_t sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points above U+10FFFF.
  if (c == 0xE0 && b(1) < 0xA0) return 0;
  if (c == 0xED && b(1) >= 0xA0) return 0;
  if (c == 0xF0 && b(1) < 0x90) return 0;
  if (c == 0xF4 && b(1) >= 0x90) return 0;
  return n;
}

char32_t decode_at(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

enum class CaseMapping { kUpper, kLower, kTitle };

// ICU's full case mapping of one code point (SpecialCasing included), without context: what
// CPython's _PyUnicode_To{Upper,Lower,Title}Full compute.
void append_mapped(std::string& out, char32_t c, CaseMapping how) {
  if (c < 0x80) {
    char ch = static_cast<char>(c);
    if (how == CaseMapping::kLower) {
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    } else if (ch >= 'a' && ch <= 'z') {
      ch = static_cast<char>(ch - 'a' + 'A');
    }
    out.push_back(ch);
    return;
  }
  UChar src[2];
  int32_t len = 0;
  U16_APPEND_UNSAFE(src, len, static_cast<UChar32>(c));
  UChar dest[8];
  UErrorCode status = U_ZERO_ERROR;
  int32_t n = 0;
  if (how == CaseMapping::kUpper) {
    n = u_strToUpper(dest, 8, src, len, "", &status);
  } else if (how == CaseMapping::kLower) {
    n = u_strToLower(dest, 8, src, len, "", &status);
  } else {
    // The whole (one-character) string is one titlecasing segment: no word-break data needed.
    thread_local std::unique_ptr<UCaseMap, void (*)(UCaseMap*)> map(nullptr, ucasemap_close);
    if (!map) {
      UErrorCode open_status = U_ZERO_ERROR;
      map.reset(ucasemap_open("", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT |
                                      U_TITLECASE_NO_LOWERCASE, &open_status));
      ZS_CHECK(U_SUCCESS(open_status), "ICU case map: ", u_errorName(open_status));
    }
    n = ucasemap_toTitle(map.get(), dest, 8, src, len, &status);
  }
  ZS_CHECK(U_SUCCESS(status) && n <= 8, "ICU case mapping of U+", static_cast<uint32_t>(c), ": ",
           u_errorName(status));
  for (int32_t k = 0; k < n;) {
    UChar32 mapped;
    U16_NEXT(dest, k, n, mapped);
    append_utf8(out, static_cast<char32_t>(mapped));
  }
}

bool has(char32_t c, UProperty p) { return u_hasBinaryProperty(static_cast<UChar32>(c), p); }
bool is_case_ignorable(char32_t c) { return has(c, UCHAR_CASE_IGNORABLE); }
bool is_titlecase(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_TITLECASE_LETTER; }

// CPython's lower_ucs4 for cps[i]: capital sigma becomes final sigma after a cased letter (case-
// ignorable ones skipped) when no cased letter follows.
void append_lower_at(std::string& out, const std::u32string& cps, size_t i) {
  if (cps[i] != 0x3A3) {
    append_mapped(out, cps[i], CaseMapping::kLower);
    return;
  }
  size_t j = i;
  while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
  bool final_sigma = j > 0 && is_cased(cps[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
    final_sigma = k == cps.size() || !is_cased(cps[k]);
  }
  append_utf8(out, final_sigma ? 0x3C2 : 0x3C3);
}

}  // namespace

char32_t next_code_point(std::string_view utf8, size_t& i) { return decode_at(utf8, i); }

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return i;
}

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) out.push_back(decode_at(utf8, i));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_utf8(out, c);
  return out;
}

size_t count_code_points(std::string_view utf8) {
  size_t n = 0;
  for (char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_line_break(char32_t c) {
  return (c >= 0x0A && c <= 0x0D) || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool is_cased(char32_t c) { return has(c, UCHAR_CASED); }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_mapped(out, decode_at(s, i), CaseMapping::kUpper);
  return out;
}

std::string lower(std::string_view s) {
  const std::u32string cps = decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) append_lower_at(out, cps, i);
  return out;
}

std::string title(std::string_view s) {
  const std::u32string cps = decode(s);
  std::string out;
  out.reserve(s.size());
  bool previous_is_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_is_cased) {
      append_lower_at(out, cps, i);
    } else {
      append_mapped(out, cps[i], CaseMapping::kTitle);
    }
    previous_is_cased = is_cased(cps[i]);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  const std::u32string cps = decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_mapped(out, cps[i], CaseMapping::kTitle);
    } else {
      append_lower_at(out, cps, i);
    }
  }
  return out;
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode_at(s, i);
    if (has(c, UCHAR_UPPERCASE) || is_titlecase(c)) return false;
    cased = cased || has(c, UCHAR_LOWERCASE);
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode_at(s, i);
    if (has(c, UCHAR_LOWERCASE) || is_titlecase(c)) return false;
    cased = cased || has(c, UCHAR_UPPERCASE);
  }
  return cased;
}

const char* data_version() { return U_UNICODE_VERSION; }

}  // namespace zeroshard::text::jinja::unicode
