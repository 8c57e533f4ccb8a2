// SPDX-License-Identifier: Apache-2.0
#pragma once
// One parsed template: tokenized and parsed when built (ConfigError for what is unsupported or
// malformed), rendered any number of times, concurrently, against a set of variables.

#include <ctime>
#include <optional>
#include <string>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace zeroshard::text::jinja {

class Template {
 public:
  Template(const std::string& source, std::string source_name);

  // Renders with `variables` (over the globals: range, namespace, dict, raise_exception,
  // strftime_now, which formats `now` or the local time).
  std::string render(const ValueDict& variables, const std::optional<std::tm>& now) const;
  const std::string& source_name() const { return source_name_; }

 private:
  std::string source_name_;
  Body body_;
};

}  // namespace zeroshard::text::jinja
