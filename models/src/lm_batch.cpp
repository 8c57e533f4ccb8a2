// SPDX-License-Identifier: Apache-2.0
// Samples as causal-LM tensors and their next-token loss (lm_batch.h).

#include "zeroshard/models/lm_batch.h"

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/empty.h>

#include "zeroshard/base/error.h"

namespace zeroshard::models {

namespace {

void check_id(int32_t id, int64_t vocab_size, const data::SampleBatch& batch, size_t at) {
  if (id >= 0 && id < vocab_size) return;
  const auto seq = static_cast<size_t>(batch.seq_len);
  ZS_THROW(DataError, "sample ", batch.sample_ids[at / seq], ", position ", at % seq, ": token id ", id,
           " is outside the model's vocabulary of ", vocab_size, " ids");
}

}  // namespace

LmBatch to_lm_batch(const data::SampleBatch& batch, int64_t vocab_size, c10::Device device) {
  const int64_t rows = batch.size(), seq = batch.seq_len;
  const auto n = static_cast<size_t>(rows * seq);
  ZS_REQUIRE(batch.inputs.size() == n && batch.targets.size() == n && batch.loss_mask.size() == n &&
                 batch.doc_ids.size() == n && batch.positions.size() == n,
             UsageError, "to_lm_batch: a batch of ", rows, " rows of ", seq, " positions needs ", n,
             " entries per array");
  const auto opts = at::TensorOptions().dtype(at::kLong);
  LmBatch b;
  b.ids = at::empty({rows, seq}, opts);
  b.positions = at::empty({rows, seq}, opts);
  b.documents = at::empty({rows, seq}, opts);
  b.targets = at::empty({rows, seq}, opts);
  int64_t* ids = b.ids.data_ptr<int64_t>();
  int64_t* pos = b.positions.data_ptr<int64_t>();
  int64_t* doc = b.documents.data_ptr<int64_t>();
  int64_t* tgt = b.targets.data_ptr<int64_t>();
  for (size_t i = 0; i < n; ++i) {
    check_id(batch.inputs[i], vocab_size, batch, i);
    ids[i] = batch.inputs[i];
    pos[i] = batch.positions[i];
    doc[i] = batch.doc_ids[i];
    tgt[i] = -100;
    if (batch.loss_mask[i] != 0) {
      check_id(batch.targets[i], vocab_size, batch, i);
      tgt[i] = batch.targets[i];
      ++b.trained;
    }
  }
  if (device != c10::Device(c10::kCPU)) {
    b.ids = b.ids.to(device);
    b.positions = b.positions.to(device);
    b.documents = b.documents.to(device);
    b.targets = b.targets.to(device);
  }
  return b;
}

at::Tensor next_token_nll(const at::Tensor& logits, const at::Tensor& targets) {
  ZS_REQUIRE(logits.dim() == 3 && targets.dim() == 2 && targets.scalar_type() == at::kLong &&
                 logits.size(0) == targets.size(0) && logits.size(1) == targets.size(1),
             UsageError, "next-token loss: logits [B, T, vocab] and int64 targets [B, T] expected, got ",
             logits.sizes(), " and ", c10::toString(targets.scalar_type()), " ", targets.sizes());
  const int64_t v = logits.size(2);
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, v}), targets.reshape({-1}), {},
                                at::Reduction::None, -100)
      .view(targets.sizes());
}

}  // namespace zeroshard::models
