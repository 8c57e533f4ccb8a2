// SPDX-License-Identifier: Apache-2.0
#pragma once
// Jinja's built-in filters that chat templates use, with Jinja 3.1's semantics, plus tojson as
// transformers defines it (json.dumps, no HTML escaping, ensure_ascii false). A filter takes the
// value left of "|" and the call's arguments; bad arguments are EvalErrors.

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

using FilterFn = Value (*)(const Value& operand, CallArgs& args);

// nullptr when `name` is not a supported filter.
FilterFn find_filter(std::string_view name);
// Whether Jinja has a filter of this name (for "not supported" rather than "unknown").
bool is_jinja_filter(std::string_view name);
std::string supported_filter_names();  // "abs, capitalize, ..."

}  // namespace zeroshard::text::jinja
