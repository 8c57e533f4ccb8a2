// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small models for the sharding tests and benchmarks: each block is a zeroshard::Unit, so the
// same class trains plainly (no engine: Units just call forward) and sharded.

#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "zeroshard/engine/unit.h"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#include <ATen/ops/scaled_dot_product_attention.h>
#define ZS_TEST_HAS_SDPA 1
#else
#define ZS_TEST_HAS_SDPA 0
#endif

namespace zs_test {

// A block with a single parameter (no bias) and one with a frozen bias.
struct MlpBlockImpl : torch::nn::Module {
  MlpBlockImpl(int64_t dim, bool bias, bool freeze_bias)
      : fc(register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(bias)))) {
    if (bias && freeze_bias) fc->bias.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(fc(x)) + x; }
  torch::nn::Linear fc;
};
TORCH_MODULE(MlpBlock);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t in = 7, int64_t hidden = 13, int64_t out = 5, int blocks = 3) {
    input = register_module("input", torch::nn::Linear(in, hidden));
    for (int i = 0; i < blocks; ++i) {
      bool bias = i != 1, freeze = i == 2;  // block 1: single parameter; block 2: frozen bias
      layers.push_back(register_module("b" + std::to_string(i), zeroshard::Unit<MlpBlockImpl>(hidden, bias, freeze)));
    }
    output = register_module("output", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = input(x);
    for (auto& b : layers) x = b(x);
    return output(x);
  }
  torch::nn::Linear input{nullptr}, output{nullptr};
  std::vector<zeroshard::Unit<MlpBlockImpl>> layers;
};
TORCH_MODULE(Mlp);

// Units between a frozen input layer and a frozen LayerNorm, then a trainable head: outside the
// units (the root) only the head trains, so its gradient arrives before the frozen norm's backward,
// which still reads the norm's weight. As a LoRA fine-tune with a trainable head looks.
struct FrozenRootNormNetImpl : torch::nn::Module {
  FrozenRootNormNetImpl() {
    input = register_module("input", torch::nn::Linear(7, 13));
    for (int i = 0; i < 2; ++i) {
      layers.push_back(register_module("b" + std::to_string(i), zeroshard::Unit<MlpBlockImpl>(13, true, false)));
    }
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({13})));
    output = register_module("output", torch::nn::Linear(13, 5));
    for (auto& p : input->parameters()) p.set_requires_grad(false);
    for (auto& p : norm->parameters()) p.set_requires_grad(false);
    torch::NoGradGuard no_grad;  // a norm that is not the identity, so its backward reads its weight
    norm->weight.uniform_(0.5, 1.5);
    norm->bias.uniform_(-0.5, 0.5);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = input(x);
    for (auto& b : layers) x = b(x);
    return output(norm(x));
  }
  torch::nn::Linear input{nullptr}, output{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  std::vector<zeroshard::Unit<MlpBlockImpl>> layers;
};
TORCH_MODULE(FrozenRootNormNet);

// Linear -> BatchNorm -> ReLU blocks: buffers (running statistics) live in the units.
struct BnBlockImpl : torch::nn::Module {
  // No bias before BatchNorm (it would cancel out: zero gradient, see BlockImpl's qkv).
  explicit BnBlockImpl(int64_t dim)
      : fc(register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm1d(dim))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::relu(bn(fc(x))); }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d bn;
};

struct BnNetImpl : torch::nn::Module {
  BnNetImpl() {
    input = register_module("input", torch::nn::Linear(torch::nn::LinearOptions(7, 10).bias(false)));
    for (int i = 0; i < 2; ++i) layers.push_back(register_module("b" + std::to_string(i), zeroshard::Unit<BnBlockImpl>(10)));
    output = register_module("output", torch::nn::Linear(10, 5));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = input(x);
    for (auto& b : layers) x = b(x);
    return output(x);
  }
  torch::nn::Linear input{nullptr}, output{nullptr};
  std::vector<zeroshard::Unit<BnBlockImpl>> layers;
};
TORCH_MODULE(BnNet);

struct GptConfig {
  int64_t vocab = 17, dim = 12, heads = 2, layers = 2, seq = 6;
  // Attention through LibTorch's fused scaled_dot_product_attention (flash/memory-efficient
  // kernels on CUDA; LibTorch 2.x only) instead of the explicit softmax(QK^T)V below.
  bool fused_attention = false;
};

// Whether this LibTorch has scaled_dot_product_attention (2.x).
constexpr bool kHasFusedAttention = ZS_TEST_HAS_SDPA != 0;

// Pre-norm transformer block with causal self-attention.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) : heads(c.heads), fused_attention(c.fused_attention) {
    if (fused_attention && !kHasFusedAttention) {
      throw std::invalid_argument("GptConfig::fused_attention needs LibTorch 2.x (scaled_dot_product_attention)");
    }
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    // No qkv bias: the key bias has an exactly zero gradient (softmax ignores it), and Adam turns
    // that gradient's rounding noise into updates, which no two implementations share.
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c.dim, 3 * c.dim).bias(false)));
    proj = register_module("proj", torch::nn::Linear(c.dim, c.dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    fc = register_module("fc", torch::nn::Linear(c.dim, 4 * c.dim));
    out = register_module("out", torch::nn::Linear(4 * c.dim, c.dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    auto parts = qkv(ln1(x)).chunk(3, -1);
    auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads, hd}).transpose(1, 2); };
    torch::Tensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    torch::Tensor y;
#if ZS_TEST_HAS_SDPA
    if (fused_attention) {
      y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
    }
#endif
    if (!y.defined()) {
      torch::Tensor att = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
      torch::Tensor mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
      att = torch::softmax(att.masked_fill(mask, -1e9), -1);
      y = att.matmul(v);
    }
    y = y.transpose(1, 2).contiguous().view({b, t, d});
    x = x + proj(y);
    return x + out(torch::gelu(fc(ln2(x))));
  }
  int64_t heads;
  bool fused_attention;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};

// Token embedding tied to the output projection (one tensor, two names).
struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c = {}) : cfg(c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.dim));
    wpe = register_module("wpe", torch::nn::Embedding(c.seq, c.dim));
    for (int64_t i = 0; i < c.layers; ++i) blocks.push_back(register_module("h" + std::to_string(i), zeroshard::Unit<BlockImpl>(c)));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    register_parameter("lm_head_weight", wte->weight);  // the output projection: the same tensor
  }
  torch::Tensor forward(torch::Tensor idx) {
    torch::Tensor pos = torch::arange(idx.size(1), idx.options().dtype(torch::kLong));
    torch::Tensor x = wte(idx) + wpe(pos);
    for (auto& b : blocks) x = b(x);
    return torch::nn::functional::linear(ln_f(x), wte->weight);
  }
  GptConfig cfg;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<zeroshard::Unit<BlockImpl>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace zs_test
