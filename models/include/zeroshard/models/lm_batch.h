// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fixed-length training samples (zeroshard/data/sample.h: packed or padded, with their loss mask
// and document boundaries) as the tensors of a causal LM step, and the loss over them.
//
//   LmBatch b = to_lm_batch(stream.next_micro_batch(), cfg.vocab_size, device);
//   at::Tensor logits = model->forward(b.ids, b.positions, b.documents);
//   at::Tensor nll = next_token_nll(logits, b.targets);   // fp32 [B, T], 0 where not trained
//
// Samples already hold the target of each position (targets[j] is the token after inputs[j]), so
// nothing is shifted here, unlike causal_lm_loss (llama.h). Dividing the summed NLL by the trained
// targets of the whole global batch (not of one rank's micro-batch) gives a loss that does not
// depend on how the batch is split over ranks and micro-batches.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "zeroshard/data/sample.h"

namespace zeroshard::models {

struct LmBatch {
  at::Tensor ids;        // int64 [B, T] inputs
  at::Tensor positions;  // int64 [B, T] positions inside each document
  at::Tensor documents;  // int64 [B, T] document numbers (attention stays inside one)
  at::Tensor targets;    // int64 [B, T] next tokens; -100 where the loss mask is 0
  int64_t trained = 0;   // targets that count in the loss
};

// DataError "sample S, position J: token id X is outside the model's vocabulary of V ids" for an
// input or a trained target outside [0, vocab_size).
LmBatch to_lm_batch(const data::SampleBatch& batch, int64_t vocab_size, c10::Device device = c10::kCPU);

// Per-position negative log-likelihood (fp32 [B, T]) of logits [B, T, vocab] against aligned
// targets [B, T]; 0 where a target is -100. UsageError for mismatched shapes or dtypes.
at::Tensor next_token_nll(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace zeroshard::models
