// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text continued by a sharded language model after training (sample.*): every rank runs the
// forward (the sharded model needs all of them), rank 0 draws each token and broadcasts it.
//
//   std::vector<int64_t> ids = zeroshard::sample_tokens(s, prompt_ids, context, vocab, run.sample,
//       [&](const at::Tensor& ctx) { return engine.forward([&] { return model->forward(ctx); }); });
//
// Draws: softmax(logits of the last position / temperature) over the top_k most likely ids (all
// with top_k 0) among the first `vocab` ids (a padded vocabulary's extra ids never occur), from a
// generator seeded with sample.seed on rank 0. Collective.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "zeroshard/config/run_options.h"

namespace zeroshard {

class Session;

// The `o.tokens` ids drawn after `prompt` (not empty), each from `logits_of(context)` with context
// int64 [1, t] on the session's device, the last `context` ids at most, and logits [1, t, >= vocab].
// Runs without gradients. UsageError for an empty prompt, context < 1 or vocab < 1.
std::vector<int64_t> sample_tokens(Session& s, std::vector<int64_t> prompt, int64_t context, int64_t vocab,
                                   const SampleOptions& o,
                                   const std::function<at::Tensor(const at::Tensor&)>& logits_of);

}  // namespace zeroshard
