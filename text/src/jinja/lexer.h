// SPDX-License-Identifier: Apache-2.0
#pragma once
// Splits a template into text and the tokens of its {{ }} and {% %} tags, with Jinja's whitespace
// rules as transformers configures them: trim_blocks and lstrip_blocks on, "-" and "+" markers,
// newlines normalized to "\n" and one trailing newline dropped. Comments are removed and
// {% raw %} becomes text here. A malformed tag is a ConfigError naming the source and line.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::text::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };
  Type type;
  std::string text;  // the text, name, operator or (unescaped) string
  int line;          // 1-based line of the token's first character
  int64_t int_value = 0;
  double float_value = 0;
};

std::vector<Token> tokenize(const std::string& source, const std::string& source_name);

// Throws ConfigError "<source_name>:<line>: <message>".
[[noreturn]] void fail_at(const std::string& source_name, int line, const std::string& message);

}  // namespace zeroshard::text::jinja
