// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model's chat template (the Jinja `chat_template` of its tokenizer_config.json), parsed once
// and rendered for each conversation with the output Hugging Face transformers gives:
// trim_blocks and lstrip_blocks on, Python's str/int/float/list semantics, tojson as
// json.dumps, raise_exception() and strftime_now() defined. The supported subset of Jinja is
// listed in docs/chat-templates.md; anything else is a ConfigError when the template is parsed,
// naming the source, the line and the construct. A ChatTemplate is immutable: renders may run
// concurrently.

#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"

namespace zeroshard::text {

// A render stopped by the template itself: it called raise_exception(message). The message()
// is "<source>:<line>: the template raised an error: <message>".
ZS_DECLARE_ERROR(ChatTemplateError, ConfigError, "chat template error");

struct ChatMessage {
  std::string role;
  std::string content;
};

// Everything a render reads besides the messages.
struct RenderOptions {
  bool add_generation_prompt = false;
  // String variables: bos_token, eos_token, and any others the template reads.
  std::map<std::string, std::string> variables;
  // More variables of any JSON type, as the text of a JSON object (e.g. {"tools": [...],
  // "date_string": "26 Jul 2024"}); empty for none. A name may be set only once in all.
  std::string json_variables;
  // What strftime_now() formats; the local time when unset.
  std::optional<std::tm> now;
};

// Where one assistant message sits in a rendered conversation: bytes [begin, end) of the UTF-8
// text, covering the message as the template renders it (its content, or its tool calls) and what
// the template appends to close the turn (an EOS, "<|eot_id|>", "<|im_end|>\n", ...): the
// tokens a model is trained to produce.
struct AssistantSpan {
  size_t message;  // index in the conversation's messages
  size_t begin;
  size_t end;
};

struct TrainingText {
  std::string text;                    // the conversation rendered without a generation prompt
  std::vector<AssistantSpan> assistant;  // one per assistant message, in order
};

// The text with each assistant span between `open` and `close`, to check by eye what a model
// would be trained to produce ("...[/INST]<<< Hello! </s>>>>").
std::string mark_assistant_spans(const TrainingText& rendered, const std::string& open = "<<<",
                                 const std::string& close = ">>>");

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // Parses a Jinja chat template; ConfigError naming `source_name`, line and the construct for
  // anything unsupported or malformed.
  ChatTemplate(const std::string& source, const std::string& source_name);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the variables chat templates expect: messages, add_generation_prompt,
  // bos_token, eos_token (and any extra string variables given). As in transformers, `tools` and
  // `documents` are None unless given.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::map<std::string, std::string>& variables = {}) const;
  std::string render(const std::vector<ChatMessage>& messages, const RenderOptions& options) const;
  // A conversation given as the text of a JSON object: "messages" (a list of objects with any
  // members: role, content as text or parts, tool_calls, ...) and any further variables
  // ("tools", ...), the form of one line of a JSONL fine-tuning file.
  std::string render_json(const std::string& conversation_json, const RenderOptions& options) const;

  // The conversation rendered for training, with the span of each assistant message. Found
  // without help from the template: for assistant message i, the render of messages[:i] with
  // add_generation_prompt=true ends where the message begins, and the render of messages[:i+1]
  // ends where its turn ends. Each of those renders must be a prefix of the next and of the
  // whole conversation's render, except for an eos_token the template adds only to close a
  // conversation without a generation prompt (Phi-3), which the last turn's span includes. A template
  // that breaks this (one that renders earlier turns differently once later ones exist) is a
  // ConfigError naming the message. options' add_generation_prompt is ignored.
  TrainingText render_for_training(const std::vector<ChatMessage>& messages, const RenderOptions& options) const;
  TrainingText render_json_for_training(const std::string& conversation_json, const RenderOptions& options) const;

  const std::string& source_name() const;

 private:
  std::unique_ptr<jinja::Template> template_;
};

}  // namespace zeroshard::text
