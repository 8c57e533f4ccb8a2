// SPDX-License-Identifier: Apache-2.0
// The built-in GPT (gpt.h): construction with GPT-2's initialisation, forward, the block checkpointing rule.

#include "zeroshard/models/gpt.h"

#include <ATen/ops/arange.h>
#include <c10/core/GradMode.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include <cmath>
#include <limits>

#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/base/error.h"

namespace zeroshard::models {
namespace {

void init_linear(zeroshard::lora::Linear& l, double std) {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(l->weight, 0.0, std);
  if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
}

}  // namespace

bool ActivationCheckpointing::applies_to(int block_index) const {
  ZS_REQUIRE(every_n_blocks >= 1, zeroshard::UsageError, "ActivationCheckpointing.every_n_blocks = ", every_n_blocks,
             " is out of range; allowed: >= 1");
  ZS_REQUIRE(block_index >= 0, zeroshard::UsageError, "ActivationCheckpointing::applies_to: block_index = ",
             block_index, " is negative; blocks are numbered from 0");
  return enabled && block_index % every_n_blocks == 0;
}

int64_t GptOptions::num_params() const {
  const int64_t d = d_model, h = mlp_ratio * d_model;
  const int64_t block = 2 * 2 * d            // two LayerNorms
                        + d * 3 * d          // qkv (no bias)
                        + d * d + d          // attention output projection
                        + d * h + h          // MLP in
                        + h * d + d;         // MLP out
  return vocab_size * d + seq_len * d + n_layer * block + 2 * d;
}

BlockImpl::BlockImpl(const GptOptions& o) : n_head(o.n_head) {
  const int64_t d = o.d_model;
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  // No qkv bias: the key bias cannot change the attention (softmax is shift-invariant).
  qkv = register_module("qkv", zeroshard::lora::Linear(torch::nn::LinearOptions(d, 3 * d).bias(false)));
  proj = register_module("proj", zeroshard::lora::Linear(d, d));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  fc = register_module("fc", zeroshard::lora::Linear(d, o.mlp_ratio * d));
  out = register_module("out", zeroshard::lora::Linear(o.mlp_ratio * d, d));
  attn_drop = register_module("attn_drop", torch::nn::Dropout(o.dropout));
  resid_drop = register_module("resid_drop", torch::nn::Dropout(o.dropout));
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(o.n_layer));
  init_linear(qkv, 0.02);
  init_linear(fc, 0.02);
  init_linear(proj, residual_std);
  init_linear(out, residual_std);
  to(o.device);  // before the ShardedInit shards this unit on its device
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / n_head;
  auto parts = qkv(ln1(x)).chunk(3, -1);
  auto heads = [&](const torch::Tensor& y) { return y.view({b, t, n_head, hd}).transpose(1, 2); };
  torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  torch::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  torch::Tensor future = at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(x.device())).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  // Softmax in fp32 whatever the compute dtype (bf16 sums of many small terms lose too much).
  att = attn_drop(at::softmax(att, -1, at::kFloat).to(q.scalar_type()));
  torch::Tensor y = att.matmul(v).transpose(1, 2).contiguous().view({b, t, d});
  x = x + resid_drop(proj(y));
  return x + resid_drop(out(torch::nn::functional::gelu(fc(ln2(x)))));
}

GptImpl::GptImpl(const GptOptions& o) : options(o) {
  wte = register_module("wte", torch::nn::Embedding(o.vocab_size, o.d_model));
  wpe = register_module("wpe", torch::nn::Embedding(o.seq_len, o.d_model));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(wte->weight, 0.0, 0.02);
    torch::nn::init::normal_(wpe->weight, 0.0, 0.02);
  }
  wte->to(o.device);
  wpe->to(o.device);
  drop = register_module("drop", torch::nn::Dropout(o.dropout));
  for (int64_t i = 0; i < o.n_layer; ++i) {
    blocks.push_back(register_module("h" + std::to_string(i), zeroshard::Unit<BlockImpl>(o)));
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model})));
  ln_f->to(o.device);
  register_parameter("lm_head_weight", wte->weight);  // the output layer: the same tensor
}

torch::Tensor GptImpl::forward(torch::Tensor idx) {
  const int64_t t = idx.size(1);
  ZS_REQUIRE(t <= options.seq_len, zeroshard::UsageError, "a sequence of ", t,
             " tokens exceeds the context length GptOptions.seq_len = ", options.seq_len);
  torch::Tensor pos = at::arange(t, at::TensorOptions().dtype(at::kLong).device(idx.device()));
  torch::Tensor x = drop(wte(idx) + wpe(pos));
  // With frozen embeddings (LoRA) the blocks' input needs no gradient, but a (reentrant)
  // activation checkpoint back-propagates into a block only through an input that requires one:
  // ask for it, as PEFT's enable_input_require_grads does.
  if (c10::GradMode::is_enabled() && !x.requires_grad()) x.requires_grad_(true);
  for (size_t i = 0; i < blocks.size(); ++i) {
    zeroshard::Unit<BlockImpl> block = blocks[i];  // a holder copy: shares the module
    if (options.checkpointing.applies_to(static_cast<int>(i))) {
      x = zeroshard::checkpoint([block](const at::Tensor& h) mutable { return block(h); }, x);
    } else {
      x = block(x);
    }
  }
  return torch::nn::functional::linear(ln_f(x), wte->weight);
}

}  // namespace zeroshard::models
