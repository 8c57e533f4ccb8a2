// SPDX-License-Identifier: Apache-2.0
#pragma once
// The model stage of a tokenizer pipeline: one pre-token (a word) in, token ids out. BPE for
// tokenizer.json files (bpe.h), byte-pair ranks for tiktoken files (tiktoken.h). Immutable after
// construction; encode is safe on any number of threads.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text::detail {

// The largest token id a vocabulary may hold: models index their tokens by id, so an id of 2^31
// in a crafted file would allocate tens of GB; the largest vocabularies in use are a few hundred
// thousand ids.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `piece` (non-empty) to `out`.
  virtual void encode(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token's text, or nullptr for an id the model does not have.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t size() const = 0;
};

}  // namespace zeroshard::text::detail
