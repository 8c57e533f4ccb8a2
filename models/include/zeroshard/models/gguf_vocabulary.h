// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model's tokenizer files as the GGUF vocabulary llama.cpp reads (tokenizer.ggml.*), as
// llama.cpp's converter writes it: byte-level BPE (tokenizer.json) as model "gpt2" with its merges
// and the pre-tokenizer named by its split regex ("gpt-2", "llama-bpe", "qwen2"); SentencePiece
// BPE (tokenizer.model, or tokenizer.json with byte_fallback) as model "llama" with scores.
// Added special tokens are control tokens, other added tokens user-defined. A vocabulary smaller
// than the model's is padded with unused tokens "[PAD<id>]".
//
// Errors: UsageError naming the file and the construct for a tokenizer that cannot be written
// (text/vocabulary.h), a split regex llama.cpp has no pre-tokenizer for, or a tokenizer with more
// tokens than `vocab_size`; IoError when `path` does not exist.

#include <cstdint>
#include <string>

#include "zeroshard/formats/gguf_vocab.h"

namespace zeroshard::models {

// `path`: a directory holding tokenizer.json or tokenizer.model (and tokenizer_config.json), or
// one such file. `vocab_size`: the model's (its embedding rows).
gguf::Vocabulary gguf_vocabulary(const std::string& path, int64_t vocab_size);

// Whether directory `dir` holds tokenizer.json or tokenizer.model.
bool has_tokenizer_files(const std::string& dir);

}  // namespace zeroshard::models
