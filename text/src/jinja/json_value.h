// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON text as template values, as Python's json.loads gives them to Jinja: objects become dicts
// (member order kept), arrays lists, integers int, other numbers float. Malformed JSON (or an
// integer beyond 64 bits) is a ConfigError naming `where`.

#include <string>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

Value value_from_json(const std::string& text, const std::string& where);

}  // namespace zeroshard::text::jinja
