// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/text/chat_template.h"

#include "chat_variables.h"
#include "jinja/json_value.h"
#include "jinja/template.h"
#include "jinja/unicode.h"

namespace zeroshard::text {
namespace detail {
namespace {

void require_utf8(const std::string& text, const std::string& what) {
  const size_t valid = jinja::unicode::valid_utf8_prefix(text);
  if (valid != text.size()) ZS_THROW(UsageError, what, " is not valid UTF-8 (byte ", valid, ")");
}

void add_variable(jinja::ValueDict& vars, const std::string& name, jinja::Value value) {
  if (vars.find(name) != nullptr) {
    ZS_THROW(UsageError, "chat template variable '", name, "' is given twice (messages and add_generation_prompt "
             "come from the render call; the others from RenderOptions and the conversation)");
  }
  vars.set(name, std::move(value));
}

}  // namespace

Conversation conversation_from(const std::vector<ChatMessage>& messages) {
  Conversation c;
  for (size_t i = 0; i < messages.size(); ++i) {
    require_utf8(messages[i].role, "the role of message " + std::to_string(i));
    require_utf8(messages[i].content, "the content of message " + std::to_string(i));
    jinja::ValueDict m;
    m.set("role", jinja::Value(messages[i].role));
    m.set("content", jinja::Value(messages[i].content));
    c.messages.push_back(jinja::Value::dict(std::move(m)));
  }
  return c;
}

Conversation conversation_from_json(const std::string& json) {
  const char* where = "conversation JSON";
  const jinja::Value v = jinja::value_from_json(json, where);
  const jinja::Value* messages = v.is_dict() ? v.as_dict().find("messages") : nullptr;
  if (messages == nullptr || !messages->is_list()) {
    ZS_THROW(ConfigError, where, ": expected an object with a \"messages\" list");
  }
  Conversation c;
  for (size_t i = 0; i < messages->as_list().size(); ++i) {
    const jinja::Value& m = messages->as_list()[i];
    if (!m.is_dict()) ZS_THROW(ConfigError, where, ": messages[", i, "] is not an object");
    c.messages.push_back(m);
  }
  for (const auto& [name, value] : v.as_dict().items()) {
    if (name != "messages") c.extra.set(name, value);
  }
  return c;
}

jinja::ValueDict render_variables(const Conversation& conversation, size_t count, bool add_generation_prompt,
                                  const RenderOptions& options) {
  jinja::ValueDict vars;
  vars.set("messages", jinja::Value::list(jinja::ValueList(conversation.messages.begin(),
                                                           conversation.messages.begin() + static_cast<long>(count))));
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  for (const auto& [name, value] : options.variables) {
    require_utf8(value, "chat template variable '" + name + "'");
    add_variable(vars, name, jinja::Value(value));
  }
  if (!options.json_variables.empty()) {
    const jinja::Value json = jinja::value_from_json(options.json_variables, "RenderOptions::json_variables");
    if (!json.is_dict()) ZS_THROW(UsageError, "RenderOptions::json_variables must be a JSON object");
    for (const auto& [name, value] : json.as_dict().items()) add_variable(vars, name, value);
  }
  for (const auto& [name, value] : conversation.extra.items()) add_variable(vars, name, value);
  // transformers (and transformers.js) always pass these two, None when the caller has none.
  for (const char* name : {"tools", "documents"}) {
    if (vars.find(name) == nullptr) vars.set(name, jinja::Value::none());
  }
  return vars;
}

}  // namespace detail

ChatTemplate::ChatTemplate(const std::string& source, const std::string& source_name)
    : template_(std::make_unique<jinja::Template>(source, source_name)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::source_name() const { return template_->source_name(); }

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::map<std::string, std::string>& variables) const {
  RenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.variables = variables;
  return render(messages, options);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const RenderOptions& options) const {
  const detail::Conversation c = detail::conversation_from(messages);
  return template_->render(detail::render_variables(c, c.messages.size(), options.add_generation_prompt, options),
                           options.now);
}

std::string ChatTemplate::render_json(const std::string& conversation_json, const RenderOptions& options) const {
  const detail::Conversation c = detail::conversation_from_json(conversation_json);
  return template_->render(detail::render_variables(c, c.messages.size(), options.add_generation_prompt, options),
                           options.now);
}

}  // namespace zeroshard::text
