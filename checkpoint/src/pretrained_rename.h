// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to load_pretrained: file tensor names to model names (PretrainedOptions' strip_prefix,
// add_prefix, rename and rename_patterns, in that order), with the patterns compiled once.

#include <regex>
#include <string>
#include <vector>

#include "zeroshard/checkpoint/pretrained.h"

namespace zeroshard::detail {

class NameMapper {
 public:
  // ConfigError naming a malformed pattern ("from=to") and what is wrong with it.
  explicit NameMapper(const PretrainedOptions& options);
  // The model name of file tensor `name`; `rule` (when given) gets the pattern that renamed it,
  // as "from=to" ("" when none did).
  std::string map(const std::string& name, std::string* rule = nullptr) const;

 private:
  struct Compiled {
    std::regex re;
    std::string replacement;  // std::regex format: $1 ... $9
    std::string label;        // "from=to"
  };
  const PretrainedOptions& o_;
  std::vector<Compiled> patterns_;
};

}  // namespace zeroshard::detail
