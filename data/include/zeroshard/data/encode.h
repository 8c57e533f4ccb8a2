// SPDX-License-Identifier: Apache-2.0
#pragma once
// RecordEncoder: a JSONL record (jsonl.h) as tokens, with the tokens the loss trains on.
//
//   RecordEncoder enc(tokenizer, spans, {tokenizer.eos_id()});   // spans: chat.h's ChatSpanFn
//   Document doc = enc.encode(record);   // doc.tokens, doc.trained (1 = a loss target)
//
// - text: encode(text, add_special_tokens = true), every token trained.
// - prompt/completion: encode(prompt, true) untrained, then encode(completion, false) trained
//   (the two are tokenized apart, so the boundary is exact).
// - messages: the conversation rendered for training by the span source (chat.h); the rendered
//   text is cut at the assistant turns' edges and each piece encoded with add_special_tokens =
//   false (the template writes BOS itself), assistant pieces trained.
// Then, with an eos_id, EOS is appended unless the tokens already end with it; it is trained when
// the token before it is. A record that gives no tokens gives an empty Document (callers skip it).
// Thread-safety: const; encode() is thread-safe when the tokenizer and renderer are.

#include <cstdint>
#include <optional>
#include <vector>

#include "zeroshard/data/chat.h"
#include "zeroshard/data/document.h"
#include "zeroshard/data/jsonl.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::data {

struct EncodeOptions {
  std::optional<int32_t> eos_id;  // appended after every document (see above); none: nothing
  // > 0: the vocabulary of the model the tokens are for; an id at or above it is an error (a
  // tokenizer may know more tokens than the model's embedding has rows).
  int64_t model_vocab_size = 0;
};

class RecordEncoder {
 public:
  // `chat` may be empty when no record has messages.
  RecordEncoder(const text::Tokenizer& tokenizer, ChatSpanFn chat, EncodeOptions options);
  // DataError (without a file:line; callers add it) for a messages record without a chat renderer,
  // the span source's errors, or a token id outside the tokenizer's or the model's vocabulary.
  Document encode(const Record& record) const;

 private:
  void append(Document* doc, const std::vector<int32_t>& ids, bool trained) const;
  void encode_messages(const std::vector<text::ChatMessage>& messages, Document* doc) const;

  const text::Tokenizer& tokenizer_;
  ChatSpanFn chat_;
  EncodeOptions options_;
};

}  // namespace zeroshard::data
