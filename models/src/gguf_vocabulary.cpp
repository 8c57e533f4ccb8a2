// SPDX-License-Identifier: Apache-2.0
// gguf_vocabulary (gguf_vocabulary.h): text::TokenizerVocabulary in llama.cpp's terms.

#include "zeroshard/models/gguf_vocabulary.h"

#include <filesystem>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/text/vocabulary.h"

namespace zeroshard::models {

namespace {

// llama.cpp's pre-tokenizer names for the split regexes of the tokenizer.json files that use them.
const std::pair<const char*, const char*> kPreTokenizers[] = {
    {"llama-bpe",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

std::string pre_tokenizer_name(const text::TokenizerVocabulary& t) {
  std::string joined;
  for (const std::string& p : t.split_patterns) joined += (joined.empty() ? "'" : "', then '") + p + "'";
  if (t.split_patterns.size() == 1) {
    if (t.split_patterns[0] == text::gpt2_split_pattern()) return "gpt-2";
    for (const auto& [name, pattern] : kPreTokenizers) {
      if (t.split_patterns[0] == pattern) return name;
    }
  }
  ZS_THROW(UsageError, t.source, ": the pre-tokenizer splits by ", joined.empty() ? "no regex" : joined,
           ", which matches none of the llama.cpp pre-tokenizers this export knows (gpt-2: GPT-2's ByteLevel regex, "
           "llama-bpe: Llama 3's, qwen2: Qwen2's)");
}

gguf::TokenType token_type(text::TokenKind k) {
  switch (k) {
    case text::TokenKind::kNormal: return gguf::TokenType::kNormal;
    case text::TokenKind::kUnknown: return gguf::TokenType::kUnknown;
    case text::TokenKind::kControl: return gguf::TokenType::kControl;
    case text::TokenKind::kUserDefined: return gguf::TokenType::kUserDefined;
    case text::TokenKind::kUnused: return gguf::TokenType::kUnused;
    case text::TokenKind::kByte: return gguf::TokenType::kByte;
  }
  ZS_THROW(Error, "unknown token kind ", static_cast<int>(k));
}

std::optional<uint32_t> id(const std::optional<int32_t>& x) {
  if (!x) return std::nullopt;
  return static_cast<uint32_t>(*x);
}

}  // namespace

bool has_tokenizer_files(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir + "/tokenizer.json", ec) ||
         std::filesystem::is_regular_file(dir + "/tokenizer.model", ec);
}

gguf::Vocabulary gguf_vocabulary(const std::string& path, int64_t vocab_size) {
  const text::TokenizerVocabulary t = text::read_vocabulary(path);
  ZS_REQUIRE(static_cast<int64_t>(t.tokens.size()) <= vocab_size, UsageError, t.source, ": the tokenizer has ",
             t.tokens.size(), " tokens, more than the model's vocab_size ", vocab_size);
  const bool sentencepiece = t.model == text::VocabularyModel::kSentencePieceBpe;
  gguf::Vocabulary v;
  v.model = sentencepiece ? "llama" : "gpt2";
  v.pre = sentencepiece ? "default" : pre_tokenizer_name(t);
  for (int64_t i = 0; i < vocab_size; ++i) {
    const bool known = i < static_cast<int64_t>(t.tokens.size()) && !t.tokens[i].empty();
    v.tokens.push_back(known ? t.tokens[i] : "[PAD" + std::to_string(i) + "]");
    v.types.push_back(known ? token_type(t.kinds[i]) : gguf::TokenType::kUnused);
    if (sentencepiece) v.scores.push_back(known ? t.scores[i] : -10000.0f);
  }
  v.merges = t.merges;
  v.bos_id = id(t.bos_id);
  v.eos_id = id(t.eos_id);
  v.unk_id = id(t.unk_id);
  v.pad_id = id(t.pad_id);
  v.add_bos = t.add_bos;
  v.add_eos = t.add_eos;
  return v;
}

}  // namespace zeroshard::models
