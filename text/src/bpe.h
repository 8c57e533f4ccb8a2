// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-pair encoding as Hugging Face's BPE model does it: a word starts as its characters (each
// looked up in the vocabulary; unknown ones become byte tokens <0xXX> with byte_fallback, or the
// unk token, fused when fuse_unk), then the adjacent pair with the lowest merge rank is merged, the
// leftmost first among equals, until no pair has a merge. A heap keeps long words O(n log n).
// ignore_merges: a word that is a vocabulary entry is that token outright.

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hash_map.h"
#include "model.h"

namespace zeroshard::text::detail {

class JsonAt;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel : public Model {
 public:
  // `vocab`: token -> id; `merges`: pairs in rank order. ConfigError naming `where` for a merge
  // that names a token outside the vocabulary or whose result is not in it, and for an unk_token
  // missing from the vocabulary.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& where);

  void encode(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t size() const override { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours' indices, -1 at the ends; prev == -2 marks a merged-away symbol
  };
  void initial_symbols(std::string_view piece, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  StringIdMap vocab_;
  std::vector<std::string> tokens_;     // id -> text
  std::vector<bool> has_token_;         // ids are not always dense
  MergeMap merges_;
  BpeOptions options_;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> ids, -1 when absent
};

// model section of tokenizer.json (type BPE).
std::unique_ptr<Model> make_bpe_model(const JsonAt& model);

}  // namespace zeroshard::text::detail
