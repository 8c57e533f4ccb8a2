// SPDX-License-Identifier: Apache-2.0
#include "jinja/py_str.h"

#include "jinja/eval_error.h"
#include "jinja/unicode.h"

namespace zeroshard::text::jinja::py_str {

std::string strip(std::string_view s, const std::optional<std::string>& chars, Side side) {
  const std::u32string set = chars ? unicode::decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : unicode::is_space(c);
  };
  size_t begin = 0, end = s.size();
  while (side != Side::kRight && begin < end) {
    size_t next = begin;
    if (!strippable(unicode::next_code_point(s, next))) break;
    begin = next;
  }
  while (side != Side::kLeft && end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t at = start;
    if (!strippable(unicode::next_code_point(s, at))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, long maxsplit) {
  const std::u32string cps = unicode::decode(s);
  std::vector<std::string> parts;
  size_t i = 0;
  while (true) {
    while (i < cps.size() && unicode::is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long>(parts.size()) == maxsplit) {
      parts.push_back(unicode::encode(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !unicode::is_space(cps[j])) ++j;
    parts.push_back(unicode::encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return parts;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit);
  if (sep->empty()) throw EvalError("str.split: empty separator");
  std::vector<std::string> parts;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<long>(parts.size()) < maxsplit) {
    const size_t at = s.find(*sep, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::vector<std::string> splitlines(std::string_view s) {
  const std::u32string cps = unicode::decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!unicode::is_line_break(cps[i])) continue;
    lines.push_back(unicode::encode(std::u32string_view(cps).substr(start, i - start)));
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(unicode::encode(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, long count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end, `count` times at most.
    const std::u32string cps = unicode::decode(s);
    long done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      unicode::append_utf8(out, c);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t start = 0;
  long done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += with;
    start = at + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

long find(std::string_view s, std::string_view sub) {
  const size_t at = s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<long>(unicode::count_code_points(s.substr(0, at)));
}

long count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<long>(unicode::count_code_points(s)) + 1;
  long n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

}  // namespace zeroshard::text::jinja::py_str
