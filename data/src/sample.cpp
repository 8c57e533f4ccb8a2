// SPDX-License-Identifier: Apache-2.0
// Sample rows and batches (sample.h).

#include "zeroshard/data/sample.h"

#include <cstddef>

namespace zeroshard::data {

void SampleBatch::resize(int64_t rows, int64_t length) {
  seq_len = length;
  const auto n = static_cast<size_t>(rows * length);
  sample_ids.resize(static_cast<size_t>(rows));
  inputs.resize(n);
  targets.resize(n);
  loss_mask.resize(n);
  doc_ids.resize(n);
  positions.resize(n);
}

SampleRow SampleBatch::row(int64_t i) {
  const auto at = static_cast<size_t>(i * seq_len);
  return {inputs.data() + at, targets.data() + at, loss_mask.data() + at, doc_ids.data() + at,
          positions.data() + at};
}

SampleBatch SampleSource::read_batch(const std::vector<int64_t>& ids) const {
  SampleBatch batch;
  batch.resize(static_cast<int64_t>(ids.size()), seq_len());
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.sample_ids[i] = ids[i];
    read(ids[i], batch.row(static_cast<int64_t>(i)));
  }
  return batch;
}

}  // namespace zeroshard::data
