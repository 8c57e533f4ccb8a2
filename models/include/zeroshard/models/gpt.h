// SPDX-License-Identifier: Apache-2.0
#pragma once
// The built-in demo family (train_gpt trains it): a GPT-style byte-level decoder with token +
// position embeddings, pre-norm blocks (causal self-attention and an MLP, each on a residual branch
// with dropout), a final LayerNorm, and an output layer tied to the token embedding (one tensor,
// two names). Each block is a zeroshard::Unit (a sharded unit) and may run under activation
// checkpointing; its Linear layers are zeroshard::lora::Linear (they carry LoRA adapters when the
// engine's unit hooks add them).
//
// Initialisation (GPT-2's): weights N(0, 0.02), the residual output projections
// N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm (1, 0). It happens inside the constructors, so
// under a zeroshard::ShardedInit each block is initialised, then sharded, before the next is built.

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/engine/unit.h"

namespace zeroshard::models {

// Which blocks recompute their activations in backward instead of storing them.
struct ActivationCheckpointing {
  bool enabled = false;
  int every_n_blocks = 1;  // blocks 0, n, 2n, ... (>= 1)
  // Whether block `block_index` (0-based) is checkpointed: enabled and block_index % every_n_blocks
  // == 0. UsageError naming the field for every_n_blocks < 1 or a negative block_index.
  bool applies_to(int block_index) const;
};

// The model's shape as plain values (the defaults are the config's `model` section).
struct GptOptions {
  int64_t vocab_size = 256;
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t n_layer = 4;
  int64_t seq_len = 128;
  int64_t mlp_ratio = 4;
  double dropout = 0.1;
  ActivationCheckpointing checkpointing;  // which blocks recompute
  c10::Device device = c10::kCPU;         // where parameters live (moved there as each module is built)

  // Trainable parameters: embeddings + blocks + final norm (the tied output layer adds none).
  int64_t num_params() const;
};

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptOptions& o);
  torch::Tensor forward(torch::Tensor x);

  int64_t n_head;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  // zeroshard::lora::Linear: torch::nn::Linear that can carry a LoRA adapter (lora.rank > 0).
  zeroshard::lora::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
  torch::nn::Dropout attn_drop{nullptr}, resid_drop{nullptr};
};

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptOptions& o);
  // idx: int64 [B, T] with T <= seq_len; returns logits [B, T, vocab_size].
  torch::Tensor forward(torch::Tensor idx);

  GptOptions options;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  std::vector<zeroshard::Unit<BlockImpl>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace zeroshard::models
