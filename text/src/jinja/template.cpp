// SPDX-License-Identifier: Apache-2.0
#include "jinja/template.h"

#include "jinja/evaluator.h"
#include "jinja/globals.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/unicode.h"

namespace zeroshard::text::jinja {

Template::Template(const std::string& source, std::string source_name) : source_name_(std::move(source_name)) {
  const size_t valid = unicode::valid_utf8_prefix(source);
  if (valid != source.size()) {
    int line = 1;
    for (size_t i = 0; i < valid; ++i) line += source[i] == '\n';
    fail_at(source_name_, line, "the template is not valid UTF-8 (byte " + std::to_string(valid) + ")");
  }
  body_ = parse(tokenize(source, source_name_), source_name_);
}

std::string Template::render(const ValueDict& variables, const std::optional<std::tm>& now) const {
  auto globals = std::make_shared<Scope>(nullptr);
  ValueDict functions;
  auto namespaces = std::make_shared<ValueList>();
  add_globals(functions, now, namespaces);
  for (const auto& [name, value] : functions.items()) globals->set(name, value);
  auto context = std::make_shared<Scope>(globals);
  for (const auto& [name, value] : variables.items()) context->set(name, value);
  auto top = std::make_shared<Scope>(context);
  struct EmptyNamespaces {  // on every way out, errors included
    ValueList& list;
    ~EmptyNamespaces() {
      for (Value& ns : list) ns.namespace_attributes() = ValueDict();
    }
  } empty_namespaces{*namespaces};
  return Evaluator(source_name_).render(body_, top);
}

}  // namespace zeroshard::text::jinja
