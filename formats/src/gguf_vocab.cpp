// SPDX-License-Identifier: Apache-2.0
// Tokenizers in GGUF files (gguf_vocab.h): the tokenizer.ggml.* keys and the byte-level vocabulary.

#include "zeroshard/formats/gguf_vocab.h"

#include "zeroshard/base/error.h"
#include "zeroshard/formats/gguf_writer.h"

namespace zeroshard::gguf {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's table: printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the
// other 68 bytes map, in byte order, to U+0100, U+0101, ...
uint32_t gpt2_code_point(uint8_t b) {
  auto printable = [](int c) {
    return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
  return 0x100 + n;
}

std::optional<std::string> out_of_range(const char* what, const std::optional<uint32_t>& id, int64_t size) {
  if (id && static_cast<int64_t>(*id) >= size) {
    return std::string(what) + " " + std::to_string(*id) + " is not below the vocabulary size " + std::to_string(size);
  }
  return std::nullopt;
}

}  // namespace

std::string gpt2_byte_token(uint8_t b) { return utf8(gpt2_code_point(b)); }

void Vocabulary::check() const {
  ZS_REQUIRE(model == "gpt2" || model == "llama", UsageError, "GGUF vocabulary: tokenizer model '", model,
             "' is not supported (\"gpt2\" or \"llama\")");
  ZS_REQUIRE(!tokens.empty(), UsageError, "GGUF vocabulary: no tokens");
  ZS_REQUIRE(types.size() == tokens.size(), UsageError, "GGUF vocabulary: ", types.size(), " token types for ",
             tokens.size(), " tokens");
  ZS_REQUIRE(scores.empty() || scores.size() == tokens.size(), UsageError, "GGUF vocabulary: ", scores.size(),
             " scores for ", tokens.size(), " tokens");
  ZS_REQUIRE(model != "llama" || !scores.empty(), UsageError,
             "GGUF vocabulary: a \"llama\" (SentencePiece) vocabulary needs one score per token");
  for (const auto& [what, id] :
       {std::pair{"bos_id", bos_id}, {"eos_id", eos_id}, {"unk_id", unk_id}, {"pad_id", pad_id}}) {
    const std::optional<std::string> bad = out_of_range(what, id, size());
    ZS_REQUIRE(!bad, UsageError, "GGUF vocabulary: ", *bad);
  }
}

void Vocabulary::write_to(Writer& w) const {
  check();
  w.add("tokenizer.ggml.model", Value::string(model));
  if (!pre.empty()) w.add("tokenizer.ggml.pre", Value::string(pre));
  w.add("tokenizer.ggml.tokens", Value::strings(tokens));
  std::vector<int32_t> t;
  t.reserve(types.size());
  for (TokenType x : types) t.push_back(static_cast<int32_t>(x));
  w.add("tokenizer.ggml.token_type", Value::int32s(t));
  if (!scores.empty()) w.add("tokenizer.ggml.scores", Value::float32s(scores));
  if (model == "gpt2") w.add("tokenizer.ggml.merges", Value::strings(merges));
  if (bos_id) w.add("tokenizer.ggml.bos_token_id", Value::uint32(*bos_id));
  if (eos_id) w.add("tokenizer.ggml.eos_token_id", Value::uint32(*eos_id));
  if (unk_id) w.add("tokenizer.ggml.unknown_token_id", Value::uint32(*unk_id));
  if (pad_id) w.add("tokenizer.ggml.padding_token_id", Value::uint32(*pad_id));
  if (add_bos) w.add("tokenizer.ggml.add_bos_token", Value::boolean(*add_bos));
  if (add_eos) w.add("tokenizer.ggml.add_eos_token", Value::boolean(*add_eos));
}

Vocabulary byte_level_vocabulary(int64_t vocab_size) {
  ZS_REQUIRE(vocab_size >= 256, UsageError,
             "a byte-level vocabulary needs at least 256 ids (one per byte), the model has ", vocab_size);
  Vocabulary v;
  v.model = "gpt2";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(gpt2_byte_token(static_cast<uint8_t>(b)));
    v.types.push_back(TokenType::kNormal);
  }
  for (int64_t id = 256; id < vocab_size; ++id) {
    v.tokens.push_back("<|unused_" + std::to_string(id) + "|>");
    v.types.push_back(TokenType::kUnused);
  }
  v.add_bos = false;
  v.add_eos = false;
  return v;
}

}  // namespace zeroshard::gguf
