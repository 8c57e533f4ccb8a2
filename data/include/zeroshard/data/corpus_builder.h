// SPDX-License-Identifier: Apache-2.0
#pragma once
// build_shards: text and JSONL files into token shards (shard_writer.h) on all cores, with the
// same output whatever the thread count.
//
//   RecordEncoder encoder(*tokenizer, renderer, {tokenizer->eos_id()});
//   BuildOptions o;
//   o.inputs = {"chat.jsonl", "book.txt"};
//   o.writer = {"out", "train", tokenizer->vocab_size()};
//   BuildResult r = build_shards(o, encoder, [](const BuildProgress& p) { ... });
//
// A file whose name ends in .jsonl holds one record per line (jsonl.h); any other file is one
// text document. JSONL files are cut into pieces of about chunk_bytes at line starts; `threads`
// workers parse and tokenize pieces while the calling thread writes their documents in input
// order (at most 2 x threads pieces are held at once). The first malformed line in input order
// stops the build with a DataError naming FILE:LINE; shards written so far stay, and no manifest
// is written (that is the caller's, after success). Thread-safety: the encoder is shared by the
// workers (its tokenizer and renderer must allow concurrent const calls).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/data/encode.h"
#include "zeroshard/data/shard_writer.h"

namespace zeroshard::data {

struct BuildOptions {
  std::vector<std::string> inputs;
  ShardWriterOptions writer;
  int threads = 0;                          // workers; 0: one per core
  int64_t chunk_bytes = int64_t{4} << 20;   // JSONL piece size
  int64_t seq_len = 0;                      // > 0: count documents longer than seq_len + 1 tokens
};

struct BuildProgress {
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
};

struct BuildResult {
  std::vector<WrittenShard> shards;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;
  int64_t empty_records = 0;       // records that gave no tokens (not written)
  int64_t longer_than_seq = 0;     // documents longer than seq_len + 1 (padding truncates them)
  int64_t bytes_read = 0;
  int threads = 0;
};

BuildResult build_shards(const BuildOptions& options, const RecordEncoder& encoder,
                         const std::function<void(const BuildProgress&)>& progress = {});

}  // namespace zeroshard::data
