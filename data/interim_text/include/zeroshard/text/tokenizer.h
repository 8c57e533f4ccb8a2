#pragma once
// INTERIM COPY, replaced by text/include/zeroshard/text/tokenizer.h when the text layer (zs_text)
// is merged: the agreed Tokenizer interface, so that data/ builds against it before then. Delete
// data/interim_text/ at that merge (data/CMakeLists.txt uses it only while no zs_text target exists).
//
// A tokenizer: text to token ids and back, its vocabulary size and special tokens, and its chat
// template source. Implementations are immutable after loading: const calls are thread-safe.

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
  virtual int32_t vocab_size() const = 0;  // ids are in [0, vocab_size)
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // UsageError outside the vocabulary
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;
  // tokenizer_config.json's "chat_template" (empty when none), bos/eos token text.
  virtual const std::string& chat_template() const = 0;
  virtual const std::string& bos_token() const = 0;
  virtual const std::string& eos_token() const = 0;
};

// A directory (tokenizer.json and/or tokenizer.model, plus tokenizer_config.json), or one of those files.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The byte vocabulary of zeroshard's built-in demo (ids 0..255 = bytes, no specials).
std::unique_ptr<Tokenizer> byte_tokenizer();

}  // namespace zeroshard::text
