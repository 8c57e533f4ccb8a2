// SPDX-License-Identifier: Apache-2.0
#pragma once
// The methods of strings and dicts that templates call (`text.strip()`, `d.items()`), as bound
// callables with CPython's results.

#include <optional>
#include <string>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

// The method `name` of `obj` bound to it, or nothing. For a Python method that is not supported
// here, nothing, with `*unsupported` set to a hint saying so.
std::optional<Value> find_method(const Value& obj, const std::string& name, std::string* unsupported);

}  // namespace zeroshard::text::jinja
