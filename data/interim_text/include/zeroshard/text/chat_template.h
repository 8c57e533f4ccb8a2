#pragma once
// INTERIM COPY, replaced by text/include/zeroshard/text/chat_template.h when the text layer
// (zs_text) is merged: the agreed ChatTemplate interface, so that data/ builds against it before
// then. Delete data/interim_text/ at that merge.
//
// A Jinja chat template (tokenizer_config.json's "chat_template") rendered for a conversation.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::text {

struct ChatMessage {
  std::string role;
  std::string content;
};

// The subset of the text layer's render options, assistant spans and training text that data/
// uses (text/'s chat_template.h has them with more members).
struct RenderOptions {
  bool add_generation_prompt = false;
  std::map<std::string, std::string> variables;  // bos_token, eos_token, ...
};

// Bytes [begin, end) of assistant message `message` in a rendered conversation, its closing
// text included.
struct AssistantSpan {
  size_t message;
  size_t begin;
  size_t end;
};

struct TrainingText {
  std::string text;                      // rendered without a generation prompt
  std::vector<AssistantSpan> assistant;  // one per assistant message, in order
};

class ChatTemplate {
 public:
  // Parses a Jinja chat template; ConfigError naming `source_name`, line and the construct for
  // anything unsupported or malformed.
  ChatTemplate(const std::string& source, const std::string& source_name);
  // Renders with the variables chat templates expect: messages, add_generation_prompt,
  // bos_token, eos_token (and any extra string variables given).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::map<std::string, std::string>& variables = {}) const;
  // The conversation rendered for training with the span of each assistant message (found by
  // prefixes of renders; ConfigError naming the message for a template that breaks that).
  TrainingText render_for_training(const std::vector<ChatMessage>& messages, const RenderOptions& options) const;
};

}  // namespace zeroshard::text
