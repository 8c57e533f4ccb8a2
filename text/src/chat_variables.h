// SPDX-License-Identifier: Apache-2.0
#pragma once
// The variables of one chat-template render, built from the messages and RenderOptions: shared by
// plain renders and the training renders that cut a conversation into prefixes.

#include <string>
#include <vector>

#include "jinja/value.h"
#include "zeroshard/text/chat_template.h"

namespace zeroshard::text::detail {

// A conversation: its messages (a list of dicts) and any other variables it carries ("tools").
struct Conversation {
  jinja::ValueList messages;
  jinja::ValueDict extra;
};

// UsageError for text that is not valid UTF-8.
Conversation conversation_from(const std::vector<ChatMessage>& messages);
// ConfigError for malformed JSON or no "messages" list of objects.
Conversation conversation_from_json(const std::string& json);

// messages[:count] with add_generation_prompt and the options' variables; UsageError for a
// variable given twice.
jinja::ValueDict render_variables(const Conversation& conversation, size_t count, bool add_generation_prompt,
                                  const RenderOptions& options);

}  // namespace zeroshard::text::detail
