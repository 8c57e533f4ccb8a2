// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fixed-length samples over token shards (sample.h), packed or padded. Both are deterministic
// functions of the shards and the options: every machine builds the same samples, and a sample's
// tokens are read only when it is read.
//
// Packing: the token stream is cut into windows; sample i reads tokens [i*L, i*L + L + 1) (L =
// seq_len; the extra token is the last target) and there are (tokens - 1) / L samples. Documents
// run on from one window into the next. A target counts in the loss when the shards' loss mask
// marks it and it belongs to the same document as its input (never across a boundary: the EOS
// ending a document is trained, the first token of the next one is not).
// Padding: sample d is document d alone: inputs are its first L tokens, targets the next ones;
// the rest is pad_id with loss 0. A document longer than L + 1 tokens is truncated (its tail is
// not trained); one of a single token trains nothing.
//
// Document boundaries come from the shards' document indexes (Boundaries::kIndex, what
// zeroshard-data writes), from end-of-text tokens in the stream (kEos: a document ends after each
// eos_id, for shards made elsewhere, e.g. llm.c's, whose documents each begin with EOT), or
// nowhere (kNone: one document, like llm.c's own loader). Padding needs kIndex.

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/data/sample.h"
#include "zeroshard/data/token_shards.h"

namespace zeroshard::data {

enum class Boundaries { kIndex, kEos, kNone };
// "index", "eos" or "none"; UsageError naming `option` otherwise.
Boundaries parse_boundaries(const std::string& text, const std::string& option);

struct PackOptions {
  int64_t seq_len = 0;
  Boundaries boundaries = Boundaries::kIndex;
  int32_t eos_id = -1;  // kEos: the end-of-text id
};

class PackedSamples : public SampleSource {
 public:
  // UsageError for seq_len < 1, kIndex on shards without document indexes, kEos without an
  // eos_id; DataError when the shards hold no window of seq_len + 1 tokens.
  PackedSamples(std::shared_ptr<const TokenShards> shards, PackOptions options);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_len() const override { return options_.seq_len; }
  void read(int64_t id, const SampleRow& out) const override;

 private:
  // starts[k] = 1 when window token k begins a document (k >= 1).
  void find_starts(int64_t begin, const std::vector<int32_t>& window, std::vector<uint8_t>* starts) const;

  std::shared_ptr<const TokenShards> shards_;
  PackOptions options_;
  int64_t num_samples_;
};

struct PadOptions {
  int64_t seq_len = 0;
  int32_t pad_id = -1;  // written on padding positions (inputs and targets); loss 0 there
};

class PaddedSamples : public SampleSource {
 public:
  // UsageError for seq_len < 1, a negative pad_id, or shards without document indexes.
  PaddedSamples(std::shared_ptr<const TokenShards> shards, PadOptions options);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_len() const override { return options_.seq_len; }
  void read(int64_t id, const SampleRow& out) const override;

 private:
  std::shared_ptr<const TokenShards> shards_;
  PadOptions options_;
  int64_t num_samples_;
};

}  // namespace zeroshard::data
