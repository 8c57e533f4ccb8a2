// SPDX-License-Identifier: Apache-2.0
#pragma once
// The loaders behind load_tokenizer, one per file format.

#include <memory>
#include <string>

#include "sentencepiece_backend.h"
#include "tokenizer_config.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::text::detail {

// Hugging Face tokenizer.json (tokenizer_json.cpp).
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const TokenizerConfig& config);
// SentencePiece model, a protobuf (sentencepiece_model.cpp).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const TokenizerConfig& config);
// The SentencePiece library's view of the model at `path` (ConfigError when it is not one).
std::unique_ptr<SentencePieceBackend> open_sentencepiece(const std::string& path);
// tiktoken rank file: "base64-token rank" per line (tiktoken.cpp).
std::unique_ptr<Tokenizer> load_tiktoken(const std::string& path, const TokenizerConfig& config);
// Whether `head` (a file's first bytes) starts like a tiktoken rank file.
bool looks_like_tiktoken(const std::string& head);

}  // namespace zeroshard::text::detail
