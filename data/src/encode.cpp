// SPDX-License-Identifier: Apache-2.0
// JSONL records as tokens and loss targets (encode.h).

#include "zeroshard/data/encode.h"

#include <string_view>
#include <utility>

#include "zeroshard/base/error.h"

namespace zeroshard::data {

RecordEncoder::RecordEncoder(const text::Tokenizer& tokenizer, ChatSpanFn chat, EncodeOptions options)
    : tokenizer_(tokenizer), chat_(std::move(chat)), options_(options) {}

void RecordEncoder::append(Document* doc, const std::vector<int32_t>& ids, bool trained) const {
  const int32_t vocab = tokenizer_.vocab_size();
  for (int32_t id : ids) {
    ZS_REQUIRE(id >= 0 && id < vocab, DataError, "the tokenizer produced id ", id, ", outside its vocabulary of ",
               vocab);
    ZS_REQUIRE(options_.model_vocab_size <= 0 || id < options_.model_vocab_size, DataError, "token id ", id, " (",
               tokenizer_.id_to_token(id), ") is outside the model's vocabulary of ", options_.model_vocab_size,
               " ids");
  }
  doc->tokens.insert(doc->tokens.end(), ids.begin(), ids.end());
  doc->trained.insert(doc->trained.end(), ids.size(), trained ? 1 : 0);
}

void RecordEncoder::encode_messages(const std::vector<text::ChatMessage>& messages, Document* doc) const {
  ZS_REQUIRE(static_cast<bool>(chat_), DataError,
             "a \"messages\" record needs a chat template, and the tokenizer has none");
  const RenderedChat chat = chat_(messages);
  const std::string_view text = chat.text;
  size_t at = 0;
  for (const TextSpan& span : chat.assistant) {
    append(doc, tokenizer_.encode(text.substr(at, span.begin - at), false), false);
    append(doc, tokenizer_.encode(text.substr(span.begin, span.end - span.begin), false), true);
    at = span.end;
  }
  append(doc, tokenizer_.encode(text.substr(at), false), false);
}

Document RecordEncoder::encode(const Record& record) const {
  Document doc;
  switch (record.kind) {
    case RecordKind::kText:
      append(&doc, tokenizer_.encode(record.text, true), true);
      break;
    case RecordKind::kPromptCompletion:
      append(&doc, tokenizer_.encode(record.prompt, true), false);
      append(&doc, tokenizer_.encode(record.completion, false), true);
      break;
    case RecordKind::kMessages:
      encode_messages(record.messages, &doc);
      break;
  }
  if (doc.tokens.empty() || !options_.eos_id) return doc;
  if (doc.tokens.back() != *options_.eos_id) append(&doc, {*options_.eos_id}, doc.trained.back() != 0);
  return doc;
}

}  // namespace zeroshard::data
