// SPDX-License-Identifier: Apache-2.0
#pragma once
// Code points and Python's view of them, for the string operations of the template engine.
// Strings are UTF-8 throughout; callers validate once at the edge (valid_utf8_prefix) and the
// rest assumes valid input. Character classes and case mappings follow CPython's str (full case
// mappings, final sigma), with ICU's Unicode data. Thread-safe: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

namespace zeroshard::text::jinja::unicode {

// The length of the longest valid UTF-8 prefix of `s` (== s.size() when all of it is valid).
size_t valid_utf8_prefix(std::string_view s);

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t c);
// The code point at byte i of valid UTF-8; advances i past it.
char32_t next_code_point(std::string_view utf8, size_t& i);
size_t count_code_points(std::string_view utf8);

// str.isspace(): the whitespace str.split(), str.strip() and the regex \s agree on.
bool is_space(char32_t c);
// The boundaries of str.splitlines() (\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029).
bool is_line_break(char32_t c);
// str.isprintable() of one character: what repr() leaves unescaped.
bool is_printable(char32_t c);
bool is_cased(char32_t c);

std::string upper(std::string_view s);        // str.upper()
std::string lower(std::string_view s);        // str.lower(), with the final sigma rule
std::string title(std::string_view s);        // str.title()
std::string capitalize(std::string_view s);   // str.capitalize()
bool is_lower(std::string_view s);            // str.islower()
const char* data_version();                   // the Unicode version of the data: "15.0"
bool is_upper(std::string_view s);            // str.isupper()

}  // namespace zeroshard::text::jinja::unicode
