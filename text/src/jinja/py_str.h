// SPDX-License-Identifier: Apache-2.0
#pragma once
// Python's str methods that chat templates call, on UTF-8 text, with CPython's results (indices
// count code points, whitespace is str.isspace()). Throws EvalError where Python raises
// (an empty separator). Thread-safe: pure functions.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text::jinja::py_str {

enum class Side { kLeft, kRight, kBoth };
// str.strip / lstrip / rstrip: `chars` unset strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, Side side);
// str.split: `sep` unset splits on runs of whitespace; maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> splitlines(std::string_view s);
// str.replace: count < 0 replaces all.
std::string replace(std::string_view s, std::string_view old, std::string_view with, long count);
long find(std::string_view s, std::string_view sub);   // code-point index, or -1
long count(std::string_view s, std::string_view sub);  // non-overlapping occurrences

}  // namespace zeroshard::text::jinja::py_str
