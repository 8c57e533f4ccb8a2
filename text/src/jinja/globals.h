// SPDX-License-Identifier: Apache-2.0
#pragma once
// The functions every render can call: Jinja's range, namespace and dict, and the two
// transformers adds, raise_exception(message) and strftime_now(format).

#include <ctime>
#include <memory>
#include <optional>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

// Adds the global functions to `globals`. strftime_now formats `now`, or the local time when
// unset (as transformers does). Each namespace() made is added to `namespaces`, so the render can
// empty them when it ends (a namespace may hold itself: a cycle that would never be freed).
void add_globals(ValueDict& globals, const std::optional<std::tm>& now, std::shared_ptr<ValueList> namespaces);

}  // namespace zeroshard::text::jinja
