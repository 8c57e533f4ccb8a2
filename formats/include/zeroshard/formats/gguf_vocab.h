// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tokenizer a GGUF file carries (llama.cpp's tokenizer.ggml.* keys), as a plain value that an
// exporter writes and a tokenizer library can fill: the model kind ("gpt2": byte-level BPE with
// merges; "llama": SentencePiece with scores), one string per token id, each token's type, the
// merges or scores, and the special ids. byte_level_vocabulary() gives a vocabulary without a
// trained tokenizer: id b < 256 is the single byte b (in GPT-2's byte-to-unicode spelling, so
// llama.cpp decodes it to that byte), no merges, and ids from 256 up are unused padding tokens.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::gguf {

class Writer;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocabulary {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::string pre;             // tokenizer.ggml.pre (empty: not written; llama.cpp then uses its default)
  std::vector<std::string> tokens;
  std::vector<TokenType> types;     // one per token
  std::vector<float> scores;        // empty, or one per token
  std::vector<std::string> merges;  // "gpt2": "a b" pairs (written even when empty)
  std::optional<uint32_t> bos_id, eos_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // UsageError naming what is inconsistent (sizes, ids out of range, an unknown model kind).
  void check() const;
  // Adds the tokenizer.ggml.* keys to `w`.
  void write_to(Writer& w) const;
};

// GPT-2's printable spelling of byte `b` (its bytes_to_unicode table), as UTF-8.
std::string gpt2_byte_token(uint8_t b);
// The byte-level vocabulary of `vocab_size` >= 256 ids described above.
Vocabulary byte_level_vocabulary(int64_t vocab_size);

}  // namespace zeroshard::gguf
