// SPDX-License-Identifier: Apache-2.0
// Rendering conversations and locating their assistant turns (chat.h).

#include "zeroshard/data/chat.h"

#include <memory>

#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

RenderedChat render_chat(const std::vector<text::ChatMessage>& messages, const ChatRenderFn& render) {
  RenderedChat out;
  out.text = render(messages, false);
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].role != "assistant") continue;
    const std::vector<text::ChatMessage> before(messages.begin(), messages.begin() + static_cast<long>(k));
    const std::vector<text::ChatMessage> through(messages.begin(), messages.begin() + static_cast<long>(k) + 1);
    const std::string opened = render(before, true);
    const std::string closed = render(through, false);
    ZS_REQUIRE(starts_with(closed, opened), DataError, "the chat template's rendering of messages [0, ", k,
               ") with the generation prompt is not the start of its rendering of messages [0, ", k,
               "]: the assistant turn of message ", k, " cannot be located");
    ZS_REQUIRE(starts_with(out.text, closed), DataError, "the chat template's rendering of messages [0, ", k,
               "] is not the start of its rendering of the whole conversation (the template rewrites earlier "
               "turns when later ones follow): the assistant turn of message ", k, " cannot be located");
    if (closed.size() > opened.size()) out.assistant.push_back({opened.size(), closed.size()});
  }
  return out;
}

ChatSpanFn template_spans(const text::Tokenizer& tokenizer, const std::string& source,
                          const std::string& source_name) {
  auto tmpl = std::make_shared<const text::ChatTemplate>(source, source_name);
  text::RenderOptions options;
  options.variables = {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
  return [tmpl, options](const std::vector<text::ChatMessage>& messages) {
    const text::TrainingText t = tmpl->render_for_training(messages, options);
    RenderedChat out{t.text, {}};
    for (const text::AssistantSpan& s : t.assistant) out.assistant.push_back({s.begin, s.end});
    return out;
  };
}

}  // namespace zeroshard::data
