// SPDX-License-Identifier: Apache-2.0
#pragma once
// Conversations for training: the rendered text of a conversation and where its assistant turns
// lie in it (the only parts trained on). The encoder gets them from one function, a ChatSpanFn:
//
//   ChatSpanFn spans = template_spans(tokenizer, tokenizer.chat_template(), "tokenizer_config.json");
//   RenderedChat chat = spans(messages);   // chat.text, chat.assistant: byte ranges of the turns
//
// template_spans uses the chat template's own render_for_training (text/chat_template.h);
// render_chat finds the spans the same way from any render function (tests, other renderers):
// for each assistant message k, the rendering of messages [0, k) with the generation prompt must
// be a prefix of the rendering of messages [0, k], and that of the whole conversation's; the
// bytes between the first two are message k's turn, its end-of-turn text included. Templates
// that rewrite earlier turns once later ones exist break this and get an error saying so.
// Thread-safety: pure functions; a ChatSpanFn from template_spans is const and thread-safe.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/text/chat_template.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::data {

struct TextSpan {
  size_t begin = 0;
  size_t end = 0;  // exclusive
  bool operator==(const TextSpan& o) const { return begin == o.begin && end == o.end; }
};

struct RenderedChat {
  std::string text;                 // the whole conversation, no generation prompt
  std::vector<TextSpan> assistant;  // ascending, one per assistant message
};

// The span source: a conversation rendered for training.
using ChatSpanFn = std::function<RenderedChat(const std::vector<text::ChatMessage>& messages)>;
// A plain renderer; with add_generation_prompt, followed by the text that opens an assistant turn.
using ChatRenderFn =
    std::function<std::string(const std::vector<text::ChatMessage>& messages, bool add_generation_prompt)>;

// The spans by prefixes of `render`'s output (above). DataError (without a file:line; the caller
// adds it) when the renderer is not prefix-stable at an assistant message.
RenderedChat render_chat(const std::vector<text::ChatMessage>& messages, const ChatRenderFn& render);

// The span source of a Jinja chat template (text::ChatTemplate) with the tokenizer's bos_token
// and eos_token. ConfigError naming `source_name` when the template cannot be parsed.
ChatSpanFn template_spans(const text::Tokenizer& tokenizer, const std::string& source,
                          const std::string& source_name);

}  // namespace zeroshard::data
