#pragma once
// INTERIM COPY, replaced by text/include/zeroshard/text/chat_template.h when the text layer
// (zs_text) is merged: the agreed ChatTemplate interface, so that data/ builds against it before
// then. Delete data/interim_text/ at that merge.
//
// A Jinja chat template (tokenizer_config.json's "chat_template") rendered for a conversation.

#include <map>
#include <string>
#include <vector>

namespace zeroshard::text {

struct ChatMessage {
  std::string role;
  std::string content;
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
};

}  // namespace zeroshard::text
