// SPDX-License-Identifier: Apache-2.0
#pragma once
// The errors of a render before they know where they happened. Operations on values throw these;
// the evaluator adds the template's name and line and turns them into zeroshard errors.

#include <stdexcept>
#include <string>

namespace zeroshard::text::jinja {

// A render that cannot go on: a type error, an undefined value used, a bad argument.
struct EvalError : std::runtime_error {
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
};

// The template called raise_exception(message).
struct RaisedError : std::runtime_error {
  explicit RaisedError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace zeroshard::text::jinja
