// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardWriter: documents (document.h) into token shards in llm.c's format, each with its document
// index (X.docs) and loss mask (X.mask).
//
//   ShardWriter w({"out", "train", /*vocab_size=*/50257, /*shard_tokens=*/100'000'000});
//   for (const Document& d : docs) w.add(d);
//   std::vector<WrittenShard> shards = w.finish();   // out/train_000000.bin, .docs, .mask, ...
//
// Token width: uint16 (llm.c magic 20240520, version 1) when vocab_size <= 65536, so every id fits
// in 16 bits; uint32 (magic 20240801, version 7) above. A shard is closed before the document that
// would take it past shard_tokens (so shards hold at most shard_tokens, unless one document alone
// is longer) and never past llm.c's limit of 2^31 - 1 tokens; documents never span two shards.
// Thread-safety: one thread.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/data/document.h"
#include "zeroshard/data/loss_mask.h"

namespace zeroshard::data {

struct ShardWriterOptions {
  std::string dir;
  std::string prefix = "shard";
  int64_t vocab_size = 0;
  int64_t shard_tokens = 100'000'000;
};

struct WrittenShard {
  std::string path;  // the .bin file
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t trained_tokens = 0;
};

class ShardWriter {
 public:
  // Creates `dir` when missing. UsageError for vocab_size < 1 or shard_tokens < 1; IoError when
  // the folder cannot be made or already holds shards named PREFIX_*.bin (they would mix with these).
  explicit ShardWriter(ShardWriterOptions options);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one document (empty ones are skipped). DataError for an id outside the vocabulary or a
  // document longer than 2^31 - 1 tokens.
  void add(const Document& doc);
  // Closes the last shard; the shards written, in order.
  std::vector<WrittenShard> finish();
  int bytes_per_token() const { return bytes_per_token_; }

 private:
  void open_shard();
  void close_shard();
  void write_tokens(const std::vector<int32_t>& tokens);

  ShardWriterOptions options_;
  int bytes_per_token_;
  FILE* file_ = nullptr;
  std::unique_ptr<LossMaskWriter> mask_;
  WrittenShard current_;
  std::vector<int64_t> starts_;  // the current shard's document offsets
  std::vector<WrittenShard> written_;
  std::vector<uint8_t> buffer_;
};

}  // namespace zeroshard::data
