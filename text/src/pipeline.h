// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tokenizer pipeline of tokenizer.json (and of tiktoken files, which load into the same
// shape): added tokens are split off the raw text, the rest is normalized, split off the normalized
// added tokens, pre-tokenized into pieces, and each piece encoded by the model (through a
// per-thread cache of recent pieces); the post-processor adds BOS/EOS. Decoding maps ids to token
// texts and runs the decoder chain.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "added_vocabulary.h"
#include "decoders.h"
#include "model.h"
#include "normalizers.h"
#include "post_processors.h"
#include "pre_tokenizers.h"
#include "tokenizer_config.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::text::detail {

struct PipelineParts {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the text is one piece
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens joined by spaces
  std::vector<AddedToken> added_tokens;
};

class PipelineTokenizer : public Tokenizer {
 public:
  // `config` adds its added_tokens_decoder entries, names bos/eos/pad, and its add_bos_token /
  // add_eos_token replace the post-processor (as transformers' Llama tokenizers do). `source`
  // names the tokenizer in errors.
  PipelineTokenizer(PipelineParts parts, const TokenizerConfig& config, std::string source);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> pad_id() const override { return pad_id_; }
  const std::string& chat_template() const override { return chat_template_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }

 private:
  void encode_section(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;
  const std::string* token_text(int32_t id) const;
  std::optional<int32_t> config_token_id(const TokenizerConfig& config, const std::optional<std::string>& token,
                                         const char* key) const;
  void apply_config(const TokenizerConfig& config);

  PipelineParts parts_;
  AddedVocabulary added_;
  std::string source_;
  uint64_t cache_id_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::string bos_token_, eos_token_, chat_template_;
  bool clean_up_spaces_ = false;
};

}  // namespace zeroshard::text::detail
