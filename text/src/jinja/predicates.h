// SPDX-License-Identifier: Apache-2.0
#pragma once
// Jinja's tests (`x is defined`, `x is divisibleby 3`) with Jinja 3.1's semantics. Named
// predicates here so they are not mistaken for unit tests.

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

using TestFn = bool (*)(const Value& operand, const CallArgs& args);

TestFn find_test(std::string_view name);  // nullptr when not supported
bool is_jinja_test(std::string_view name);
std::string supported_test_names();

}  // namespace zeroshard::text::jinja
