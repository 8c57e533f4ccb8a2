// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tokenizers of Hugging Face models, in C++: `tokenizer.json` (BPE: byte-level as GPT-2, Llama 3
// and Qwen2 use it, SentencePiece-style with byte fallback as Llama 2 and Mistral use it),
// SentencePiece `tokenizer.model` files, and tiktoken rank files (Llama 3's original
// `tokenizer.model`), each with the `tokenizer_config.json` beside it. Ids match Hugging Face's
// tokenizers id for id (docs/tokenizers.md says what is supported and how that is checked).
//
// Thread-safety: a loaded Tokenizer is immutable; encode and decode are const and may run on any
// number of threads at once (encode_batch does). Errors: ConfigError naming the file and the
// construct for anything unsupported or malformed, UsageError for bad calls (an id outside the
// vocabulary, text that is not UTF-8).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special_tokens: the post-processor's BOS/EOS etc. as the tokenizer files ask.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int32_t vocab_size() const = 0;            // ids are in [0, vocab_size)
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;   // UsageError outside the vocabulary
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;
  // tokenizer_config.json's "chat_template" (empty when none), bos/eos token text.
  virtual const std::string& chat_template() const = 0;
  virtual const std::string& bos_token() const = 0;
  virtual const std::string& eos_token() const = 0;
};

// A directory (tokenizer.json and/or tokenizer.model, plus tokenizer_config.json), or one of those
// files. A directory with both uses tokenizer.json (as Hugging Face's fast tokenizers do).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The byte vocabulary of zeroshard's built-in demo (ids 0..255 = bytes, no specials).
std::unique_ptr<Tokenizer> byte_tokenizer();

// Encodes every text, in order, on `threads` threads (0: all cores), sharing one small pool.
std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                                               bool add_special_tokens = true, int threads = 0);

}  // namespace zeroshard::text
