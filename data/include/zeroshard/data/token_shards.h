// SPDX-License-Identifier: Apache-2.0
#pragma once
// TokenShards: many token files read as one stream of tokens, with random access to any global
// token range, and the files' document indexes and loss masks when they have them.
//
//   TokenShards shards({"data/train_*.bin"}, {TokenFormat::kLlmc, /*vocab_size=*/50257});
//   std::vector<int32_t> ids(1025);
//   shards.read(/*begin=*/123456789, 1025, ids.data());   // may span two files
//
// Inputs are paths or glob patterns (*, ?, [...]); each pattern's matches are sorted by name and
// the inputs keep their order. Global token offsets run through the files in that order. Sidecars
// (doc_index.h, loss_mask.h) are all-or-none: when one shard has X.docs (or X.mask), every shard
// must. Nothing is read at construction beyond headers; a read maps only the pages it needs.
// Thread-safety: immutable after construction; const calls are thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/data/doc_index.h"
#include "zeroshard/data/loss_mask.h"
#include "zeroshard/data/shard_file.h"

namespace zeroshard::data {

struct ShardSetOptions {
  TokenFormat format = TokenFormat::kLlmc;
  // > 0: every token read is checked against it (DataError naming the file and token offset).
  int64_t vocab_size = 0;
};

class TokenShards {
 public:
  // The files `inputs` name, patterns expanded. UsageError for no inputs or a file listed twice;
  // DataError for a pattern that matches nothing.
  static std::vector<std::string> expand(const std::vector<std::string>& inputs);

  // Opens every file (ShardFile's errors) and its sidecars; DataError when sidecars are present
  // for some shards and missing for others.
  TokenShards(const std::vector<std::string>& inputs, ShardSetOptions options);

  int64_t num_tokens() const { return begins_.back(); }
  size_t num_files() const { return files_.size(); }
  const ShardFile& file(size_t i) const { return files_[i]; }
  int64_t file_begin(size_t i) const { return begins_[i]; }  // global offset of file i's first token
  const ShardSetOptions& options() const { return options_; }

  // Tokens [begin, begin + count) of the stream (ShardFile::read's checks). Thread-safe.
  void read(int64_t begin, int64_t count, int32_t* out) const;

  bool has_doc_index() const { return !docs_.empty(); }
  bool has_loss_mask() const { return !masks_.empty(); }
  // out[i] = 1 when token begin + i is a loss target; all 1 when the shards have no loss masks.
  void read_loss_mask(int64_t begin, int64_t count, uint8_t* out) const;

  // With document indexes (UsageError otherwise): the documents of all files in order,
  // document(d) = its global token range [begin, end).
  int64_t num_documents() const;
  std::pair<int64_t, int64_t> document(int64_t d) const;
  // Appends the global offsets in (begin, end) where a document starts, ascending.
  void document_starts(int64_t begin, int64_t end, std::vector<int64_t>* out) const;

 private:
  size_t file_at(int64_t token) const;  // the file holding global token `token`
  void require_doc_index(const char* what) const;

  ShardSetOptions options_;
  std::vector<ShardFile> files_;
  std::vector<int64_t> begins_;  // files_.size() + 1 global offsets
  std::vector<DocIndexFile> docs_;
  std::vector<int64_t> doc_begins_;  // files_.size() + 1 global document numbers
  std::vector<LossMaskFile> masks_;
};

}  // namespace zeroshard::data
