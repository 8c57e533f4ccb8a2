#pragma once
// Conversations for training: a conversation rendered by a chat template, and where its assistant
// turns lie in the rendered text (the only parts trained on).
//
//   ChatRenderFn render = template_renderer(tokenizer, tokenizer.chat_template(), "tokenizer_config.json");
//   RenderedChat chat = render_chat(messages, render);
//   // chat.text: the whole conversation; chat.assistant: byte ranges of the assistant turns
//
// render_chat is the one source of assistant spans. It needs nothing from the template but
// rendering: for each assistant message k, the rendering of messages [0, k) with the generation
// prompt must be a prefix of the rendering of messages [0, k] (and that one of the whole
// conversation); the bytes between the two are message k's turn, its end-of-turn text included.
// Templates that rewrite earlier turns once later ones exist (e.g. dropping earlier reasoning)
// break this and get a DataError saying so. Thread-safety: pure functions; a renderer from
// template_renderer is const and thread-safe when the template is.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/text/chat_template.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::data {

// Renders `messages`; with add_generation_prompt, followed by the text that opens an assistant turn.
using ChatRenderFn =
    std::function<std::string(const std::vector<text::ChatMessage>& messages, bool add_generation_prompt)>;

struct TextSpan {
  size_t begin = 0;
  size_t end = 0;  // exclusive
  bool operator==(const TextSpan& o) const { return begin == o.begin && end == o.end; }
};

struct RenderedChat {
  std::string text;
  std::vector<TextSpan> assistant;  // ascending, one per assistant message
};

// DataError (without a file:line; the caller adds it) when the template is not prefix-stable at an
// assistant message.
RenderedChat render_chat(const std::vector<text::ChatMessage>& messages, const ChatRenderFn& render);

// A renderer for a Jinja chat template (text::ChatTemplate) with the tokenizer's bos_token and
// eos_token. ConfigError naming `source_name` when the template cannot be parsed.
ChatRenderFn template_renderer(const text::Tokenizer& tokenizer, const std::string& source,
                               const std::string& source_name);

}  // namespace zeroshard::data
