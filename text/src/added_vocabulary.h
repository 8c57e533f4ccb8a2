// SPDX-License-Identifier: Apache-2.0
#pragma once
// Added tokens (tokenizer.json's added_tokens, special or not): found in the text before the
// normalizer and the model see it, leftmost-longest first, as Hugging Face's AddedVocabulary
// does. A token with normalized=false is matched in the raw text, one with normalized=true in the
// normalized text (in its normalized form); lstrip/rstrip take the whitespace beside a match into
// it, single_word accepts a match only between non-word characters. Immutable, thread-safe.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hash_map.h"

namespace zeroshard::text::detail {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  struct Span {
    size_t begin, end;
    int32_t id;  // the added token, or -1 for text between tokens
  };

  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the normalized form of tokens with normalized=true.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Appends the spans of `text` (covering all of it, in order): the raw pass matches tokens with
  // normalized=false, the normalized pass those with normalized=true.
  void split(std::string_view text, bool normalized_pass, std::vector<Span>& out) const;

  std::optional<int32_t> id_of(std::string_view content) const;
  const AddedToken* find(int32_t id) const;  // nullptr when `id` is not an added token
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const { return max_id_; }  // -1 when empty

 private:
  // A byte trie of the token texts of one pass.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first{};
    void add(std::string_view text, int32_t token);
    // The longest token starting at text[at], or -1; its length in `length`.
    int32_t longest_at(std::string_view text, size_t at, size_t& length) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  StringIdMap by_content_;
  std::vector<int32_t> index_of_id_;  // id -> index into tokens_, -1 for ids that are not added
  int32_t max_id_ = -1;
};

}  // namespace zeroshard::text::detail
