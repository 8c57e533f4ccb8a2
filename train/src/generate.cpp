// SPDX-License-Identifier: Apache-2.0
// sample_tokens (generate.h): temperature and top-k sampling, drawn on rank 0 and broadcast.

#include "zeroshard/train/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>

#include "zeroshard/base/error.h"
#include "zeroshard/core/session.h"

namespace zeroshard {

std::vector<int64_t> sample_tokens(Session& s, std::vector<int64_t> prompt, int64_t context, int64_t vocab,
                                   const SampleOptions& o,
                                   const std::function<at::Tensor(const at::Tensor&)>& logits_of) {
  ZS_REQUIRE(!prompt.empty() && context >= 1 && vocab >= 1, UsageError, "sample_tokens: a prompt of ",
             prompt.size(), " ids, context ", context, ", vocabulary ", vocab,
             ": a non-empty prompt and a positive context and vocabulary are needed");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  at::NoGradGuard no_grad;
  std::vector<int64_t> ids = std::move(prompt), out;
  for (int i = 0; i < o.tokens; ++i) {
    const auto first = ids.end() - std::min<int64_t>(context, static_cast<int64_t>(ids.size()));
    const at::Tensor ctx = at::tensor(std::vector<int64_t>(first, ids.end()), at::kLong).view({1, -1}).to(s.device());
    const at::Tensor logits = logits_of(ctx);
    ZS_REQUIRE(logits.dim() == 3 && logits.size(2) >= vocab, UsageError, "sample_tokens: logits [1, t, >= ", vocab,
               "] expected, got ", logits.sizes());
    at::Tensor next = at::zeros({1}, at::kLong);
    if (s.rank() == 0) {
      at::Tensor l = logits[0][-1].narrow(0, 0, vocab).to(at::kFloat).cpu() / o.temperature;
      if (o.top_k > 0 && o.top_k < l.numel()) {
        const at::Tensor kth = std::get<0>(at::topk(l, o.top_k)).min();
        l = l.masked_fill(l < kth, -std::numeric_limits<float>::infinity());
      }
      next = at::multinomial(at::softmax(l, -1), 1, /*replacement=*/false, gen);
    }
    s.world()->broadcast(next, 0, "train.sample")->wait();
    ids.push_back(next.item<int64_t>());
    out.push_back(ids.back());
  }
  return out;
}

}  // namespace zeroshard
