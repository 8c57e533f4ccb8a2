// SPDX-License-Identifier: Apache-2.0
#pragma once
// The text forms of a value, as Python writes them: str() for {{ }}, ~ and the string filters;
// repr() inside containers; JSON for tojson (Python's json.dumps with the arguments transformers
// passes: no ASCII escaping by default, separators ", " and ": "). Throws EvalError for what
// Python cannot write (a function, an undefined value in JSON, nesting deeper than 256).

#include <optional>
#include <string>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

std::string to_str(const Value& v);             // undefined -> "", None -> "None", True -> "True"
std::string repr(const Value& v);               // 'text', [1, 'a'], {'k': None}, (1,)
std::string float_repr(double v);               // 1.0, 0.1, 1e-05, 1e+16, inf, nan
std::string string_repr(const std::string& s);  // quotes and escapes as Python's repr(str)

struct JsonOptions {
  std::optional<std::string> indent;  // the text of one indentation level; none: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace zeroshard::text::jinja
