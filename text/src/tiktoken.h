// SPDX-License-Identifier: Apache-2.0
#pragma once
// tiktoken's model: a word's bytes are merged pairwise, always the adjacent pair whose
// concatenation has the lowest rank (leftmost among equals), until no concatenation is a token;
// a word that is a token is that token outright. Ids are the ranks. Immutable, thread-safe.

#include <string>
#include <utility>
#include <vector>

#include "hash_map.h"
#include "model.h"

namespace zeroshard::text::detail {

class TiktokenModel : public Model {
 public:
  // `ranks`: token bytes -> rank. ConfigError naming `where` when a single byte has no rank.
  TiktokenModel(std::vector<std::pair<std::string, int32_t>> ranks, const std::string& where);

  void encode(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t size() const override { return static_cast<int32_t>(tokens_.size()); }

 private:
  int32_t rank_of(std::string_view bytes) const {
    const int32_t* r = ranks_.find(bytes);
    return r ? *r : -1;
  }
  StringIdMap ranks_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
};

// Standard base64 (RFC 4648, padded); false for anything else.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace zeroshard::text::detail
