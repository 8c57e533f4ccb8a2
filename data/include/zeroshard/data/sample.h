// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training samples of a fixed length: what the model gets per position, and the interface of a
// set of samples read by id.
//
// Sample row j (0 <= j < seq_len) holds:
//   inputs[j]     the token the model reads at position j
//   targets[j]    the token it is trained to predict there (the next token)
//   loss_mask[j]  1 when targets[j] counts in the loss: 0 for prompt, system and user tokens,
//                 across a document boundary, and on padding
//   doc_ids[j]    which document of the sample position j belongs to, 0, 1, 2... in order of
//                 appearance (padding gets the number after the last document): attention stays
//                 inside equal doc_ids
//   positions[j]  j's position inside its document's part of this sample, from 0 (the position
//                 ids of a model with per-document positions; always < seq_len)
// Thread-safety: SampleSource::read is const and thread-safe in every implementation.

#include <cstdint>
#include <vector>

namespace zeroshard::data {

// Pointers to one row of seq_len entries in each array.
struct SampleRow {
  int32_t* inputs;
  int32_t* targets;
  uint8_t* loss_mask;
  int32_t* doc_ids;
  int32_t* positions;
};

// Samples row after row: entry [i * seq_len + j] is position j of sample_ids[i].
struct SampleBatch {
  int64_t seq_len = 0;
  std::vector<int64_t> sample_ids;
  std::vector<int32_t> inputs, targets, doc_ids, positions;
  std::vector<uint8_t> loss_mask;

  int64_t size() const { return static_cast<int64_t>(sample_ids.size()); }
  // Room for `rows` rows of `seq_len`.
  void resize(int64_t rows, int64_t seq_len);
  SampleRow row(int64_t i);
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_len() const = 0;
  // Writes sample `id` (in [0, num_samples()); UsageError outside) into `out`. Reads only the
  // tokens of that sample.
  virtual void read(int64_t id, const SampleRow& out) const = 0;
  // The samples `ids`, in that order.
  SampleBatch read_batch(const std::vector<int64_t>& ids) const;
};

}  // namespace zeroshard::data
