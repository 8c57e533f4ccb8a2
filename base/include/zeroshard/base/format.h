// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small text helpers every layer uses for messages and tables: one home for each. Thread-safe
// (pure functions).

#include <cstddef>
#include <cstdint>
#include <string>

namespace zeroshard {

// Shortest decimal text that reads back as `v`, Python-style exponents: 0.001, 1e-08, 0.999.
std::string format_double(double v);

// `bytes` in MiB with `decimals` digits: "12.5 MiB".
std::string format_mib(int64_t bytes, int decimals = 1);

// `bytes` in the largest unit that keeps the value >= 1, with `decimals` digits: "812 B",
// "4.0 KiB", "12.50 MiB", "1.25 GiB" (B without decimals).
std::string format_bytes(int64_t bytes, int decimals = 2);

// Levenshtein distance (insertions, deletions, substitutions of one character each). With
// `ignore_case`, ASCII letters compare case-insensitively.
size_t edit_distance(const std::string& a, const std::string& b, bool ignore_case = false);

// The reason in a JSON parser's error text without its own position prefix: nlohmann-json's
// "[json.exception.parse_error.101] parse error at line 1, column 2: WHAT" -> "WHAT" (callers
// give the position their way); text without a "column N: " part is returned whole.
std::string json_error_reason(const std::string& what);

// Whether `typed` is close enough to `candidate` to suggest it ("did you mean ...?"): at most a
// third of the longer name, and at least 2 edits, differ.
bool is_close_spelling(const std::string& typed, const std::string& candidate, size_t distance);

}  // namespace zeroshard
