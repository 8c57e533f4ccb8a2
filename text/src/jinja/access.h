// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading into values the way Jinja's sandbox does: `obj.name` tries the attribute (a method)
// before the item, `obj[key]` the item before the attribute, and a miss is an undefined value
// whose hint is Jinja's message ("list object has no element 3"). Reading into an undefined
// value is an EvalError. Also iteration and slicing with Python's rules.

#include <string>

#include "jinja/value.h"

namespace zeroshard::text::jinja {

Value get_attribute(const Value& obj, const std::string& name);  // obj.name
Value get_item(const Value& obj, const Value& key);              // obj[key]
// obj[start:stop:step]; undefined or None parts are omitted ones.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// A filter's attribute= argument: "a.b.0" reads a, then b, then item 0.
Value get_attribute_path(const Value& obj, const std::string& path);

// What `for x in v` visits: list items, a string's characters, a dict's keys; nothing for an
// undefined value. EvalError for the rest.
ValueList iterate(const Value& v);

}  // namespace zeroshard::text::jinja
