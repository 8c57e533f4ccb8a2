// SPDX-License-Identifier: Apache-2.0
#pragma once
// Post-processors of tokenizer.json for one sequence: the special tokens around the encoded text
// (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (nothing to do on ids),
// Sequence). Immutable, thread-safe.

#include <cstdint>
#include <memory>
#include <vector>

namespace zeroshard::text::detail {

class JsonAt;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around `ids` when `add_special_tokens`.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
  // The ids put before and after the sequence (for bos/eos defaults).
  virtual std::vector<int32_t> prefix() const = 0;
  virtual std::vector<int32_t> suffix() const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const JsonAt& config);

// `prefix` $A `suffix`: what tokenizer_config.json's add_bos_token / add_eos_token ask for.
std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace zeroshard::text::detail
