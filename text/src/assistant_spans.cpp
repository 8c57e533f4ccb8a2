// SPDX-License-Identifier: Apache-2.0
// ChatTemplate::render_for_training: where each assistant message sits in the rendered
// conversation, found from renders of prefixes of the conversation (no help from the template).

#include <algorithm>

#include "chat_variables.h"
#include "jinja/template.h"
#include "jinja/value_text.h"
#include "zeroshard/text/chat_template.h"

namespace zeroshard::text {
namespace {

bool is_assistant(const jinja::Value& message) {
  const jinja::Value* role = message.as_dict().find("role");
  return role != nullptr && role->is_string() && role->as_string() == "assistant";
}

// "at byte N: '...' where the longer render has '...'": the first difference of a and b.
std::string first_difference(const std::string& shorter, const std::string& longer) {
  const auto mismatch = std::mismatch(shorter.begin(), shorter.end(), longer.begin(), longer.end());
  const size_t at = static_cast<size_t>(mismatch.first - shorter.begin());
  // Back up to a character boundary so the excerpts stay valid UTF-8.
  size_t from = at;
  while (from > 0 && (static_cast<unsigned char>(shorter[from]) & 0xC0) == 0x80) --from;
  auto excerpt = [&](const std::string& s) {
    size_t to = std::min(s.size(), from + 40);
    while (to < s.size() && (static_cast<unsigned char>(s[to]) & 0xC0) == 0x80) ++to;
    return jinja::string_repr(s.substr(from, to - from));
  };
  return "at byte " + std::to_string(from) + ": " + excerpt(shorter) + " against " + excerpt(longer);
}

bool starts_with(const std::string& s, const std::string& prefix, size_t length) {
  return s.size() >= length && s.compare(0, length, prefix, 0, length) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The eos_token of the render, when one is given (a template may append it to close a
// conversation that ends without a generation prompt, as Phi-3's does).
std::string eos_token(const jinja::ValueDict& variables) {
  const jinja::Value* eos = variables.find("eos_token");
  return eos != nullptr && eos->is_string() ? eos->as_string() : std::string();
}

TrainingText spans_of(const jinja::Template& tmpl, const detail::Conversation& c, const RenderOptions& options) {
  auto render = [&](size_t count, bool add_generation_prompt) {
    return tmpl.render(detail::render_variables(c, count, add_generation_prompt, options), options.now);
  };
  TrainingText out;
  out.text = render(c.messages.size(), false);
  const std::string eos = eos_token(detail::render_variables(c, 0, false, options));
  size_t previous_end = 0;
  for (size_t i = 0; i < c.messages.size(); ++i) {
    if (!is_assistant(c.messages[i])) continue;
    const std::string head = render(i, true);
    const std::string through = render(i + 1, false);
    const std::string where = tmpl.source_name() + ": assistant message " + std::to_string(i) + ": ";
    if (!starts_with(through, head, head.size())) {
      ZS_THROW(ConfigError, where, "the render of messages[:", i, "] with add_generation_prompt=true is not a "
               "prefix of the render of messages[:", i + 1, "] (", first_difference(head, through),
               "): the template changes what precedes an assistant message once the message is there (a "
               "generation prompt unlike the turn's start, or text that moves to the last user turn), so the "
               "turn's span cannot be found from prefixes");
    }
    // A render that closes the conversation with the EOS (Phi-3) has it after the turn; the whole
    // conversation then ends with it, and the turn ends before it.
    size_t end = through.size();
    if (!starts_with(out.text, through, end) && !eos.empty() && ends_with(through, eos) && ends_with(out.text, eos) &&
        starts_with(out.text, through, through.size() - eos.size()) && through.size() - eos.size() > head.size()) {
      end = through.size() - eos.size();
    }
    if (!starts_with(out.text, through, end)) {
      ZS_THROW(ConfigError, where, "the render of messages[:", i + 1, "] is not a prefix of the render of the "
               "whole conversation (", first_difference(through, out.text), "), nor is it one followed by "
               "the eos_token: this template renders the turn differently once later messages follow, so its "
               "span cannot be found from prefixes");
    }
    if (head.size() < previous_end) {
      ZS_THROW(ConfigError, where, "its turn starts at byte ", head.size(), ", inside the previous assistant "
               "turn (which ends at byte ", previous_end, ")");
    }
    out.assistant.push_back(AssistantSpan{i, head.size(), end});
    previous_end = end;
  }
  return out;
}

}  // namespace

std::string mark_assistant_spans(const TrainingText& rendered, const std::string& open, const std::string& close) {
  std::string out;
  size_t at = 0;
  for (const AssistantSpan& span : rendered.assistant) {
    out.append(rendered.text, at, span.begin - at);
    out += open;
    out.append(rendered.text, span.begin, span.end - span.begin);
    out += close;
    at = span.end;
  }
  out.append(rendered.text, at, std::string::npos);
  return out;
}

TrainingText ChatTemplate::render_for_training(const std::vector<ChatMessage>& messages,
                                               const RenderOptions& options) const {
  return spans_of(*template_, detail::conversation_from(messages), options);
}

TrainingText ChatTemplate::render_json_for_training(const std::string& conversation_json,
                                                    const RenderOptions& options) const {
  return spans_of(*template_, detail::conversation_from_json(conversation_json), options);
}

}  // namespace zeroshard::text
