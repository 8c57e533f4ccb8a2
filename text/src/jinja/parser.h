// SPDX-License-Identifier: Apache-2.0
#pragma once
// Builds the statements of a template from its tokens, with Jinja's grammar and operator
// precedence. Anything outside the supported subset (extends, include, call blocks, unknown
// filters or tests, ...) and any malformed or unclosed block is a ConfigError
// "<source_name>:<line>: ..." that names the construct.

#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace zeroshard::text::jinja {

Body parse(const std::vector<Token>& tokens, const std::string& source_name);

// The tags a template may use, for messages: "if, for, set, ...".
const char* supported_tag_names();

}  // namespace zeroshard::text::jinja
