// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tokenizer's vocabulary as data, for writing it into another program's format (GGUF): every
// token in id order with its kind, the BPE merges or SentencePiece scores, the regexes that split
// the text before byte-level BPE, the special ids, and whether encoding adds BOS/EOS (as this
// library's encode(text, true) does for the same files).
//
// Supported: tokenizer.json with a BPE model, byte-level (GPT-2, Llama 3, Qwen2) or
// SentencePiece-style with byte_fallback (Llama 2, Mistral); SentencePiece tokenizer.model files
// of the BPE type without normalization. Anything else (WordPiece, Unigram, tiktoken rank files,
// a pre-tokenizer that is not a chain of regex splits, a Metaspace that prepends only at the start,
// a normalizing SentencePiece model) is a UsageError naming the file and the construct.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::text {

enum class VocabularyModel { kByteLevelBpe, kSentencePieceBpe };
enum class TokenKind { kNormal, kUnknown, kControl, kUserDefined, kUnused, kByte };

struct TokenizerVocabulary {
  std::string source;  // the file read
  VocabularyModel model = VocabularyModel::kByteLevelBpe;
  std::vector<std::string> tokens;  // by id; an id the files leave out is "" of kind kUnused
  std::vector<TokenKind> kinds;     // one per token: added special tokens are kControl, other added ones kUserDefined
  // kSentencePieceBpe: one per token, higher merges first (the model's own, or from the merges' order).
  std::vector<float> scores;
  std::vector<std::string> merges;          // kByteLevelBpe: "left right", in rank order
  std::vector<std::string> split_patterns;  // kByteLevelBpe: the regex of each split step, in order
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false, add_eos = false;
};

// The tokenizer of a model directory (tokenizer.json, else tokenizer.model, with
// tokenizer_config.json beside it) or of one such file.
TokenizerVocabulary read_vocabulary(const std::string& path);

// The regex GPT-2's ByteLevel pre-tokenizer splits with (split_patterns' entry for it).
const char* gpt2_split_pattern();

}  // namespace zeroshard::text
