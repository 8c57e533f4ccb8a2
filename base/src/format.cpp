// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/base/format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace zeroshard {

std::string format_double(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string format_mib(int64_t bytes, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f MiB", decimals, static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string format_bytes(int64_t bytes, int decimals) {
  const double b = static_cast<double>(bytes);
  const double abs = b < 0 ? -b : b;
  char buf[64];
  if (abs >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.*f GiB", decimals, b / (1024.0 * 1024 * 1024));
  } else if (abs >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.*f MiB", decimals, b / (1024.0 * 1024));
  } else if (abs >= 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.*f KiB", decimals, b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

size_t edit_distance(const std::string& a, const std::string& b, bool ignore_case) {
  auto same = [ignore_case](char x, char y) {
    if (!ignore_case) return x == y;
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool is_close_spelling(const std::string& typed, const std::string& candidate, size_t distance) {
  const size_t budget = std::max<size_t>(2, std::max(typed.size(), candidate.size()) / 3);
  return distance <= budget;
}

std::string json_error_reason(const std::string& what) {
  const size_t column = what.find("column ");
  const size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
  if (colon != std::string::npos) return what.substr(colon + 2);
  // "[json.exception.out_of_range.406] number overflow parsing '1e999'": the text after the tag.
  const size_t tag = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
  return tag == std::string::npos ? what : what.substr(tag + 2);
}

}  // namespace zeroshard
