// SPDX-License-Identifier: Apache-2.0
#pragma once
// A decoder with the semantics of Hugging Face's LlamaForCausalLM (also Mistral and Qwen2), built
// from a LlamaConfig (llama_config.h). Parameter names are Hugging Face's (model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight; a tied head is
// the embedding tensor under both names), so a Hugging Face checkpoint loads by name and LoRA
// targets Hugging Face's module names ("*.q_proj", ..., "*.down_proj": the projections are
// zeroshard::lora::Linear).
//
// Math, as Hugging Face computes it: RMSNorm in fp32 (w * (x * rsqrt(mean(x^2) + eps)), cast back
// to the input dtype before the weight), rotary embeddings in the rotate-half layout with inverse
// frequencies from rope_theta and rope_scaling (linear, llama3) computed in fp32, grouped-query
// attention by repeating each key/value head num_attention_heads / num_key_value_heads times,
// softmax in fp32, MLP down(silu(gate(x)) * up(x)). Attention runs through LibTorch's fused
// scaled_dot_product_attention where LibTorch has it (2.0 and later), else through the same math.
//
// Each decoder layer is a zeroshard::Unit: under a ShardedInit every layer is initialised, then
// sharded, as it is built; the embedding, final norm and head live at the root (sharded by the
// engine). Initialisation is Hugging Face's: weights N(0, initializer_range), biases 0, norms 1,
// the padding row (pad_token_id) of the embedding 0. (LibTorch cannot move a built module to the
// meta device: hf_tensors(config), hf_checkpoint.h, gives the names and shapes without memory.)
//
//   zeroshard::ShardedInit init(session, sharding);
//   zeroshard::models::LlamaForCausalLM model(zeroshard::models::LlamaOptions{cfg, session.device()});
//   zeroshard::ShardingEngine engine(init, model.ptr());
//   zeroshard::models::load_hf_weights(engine, cfg, "Llama-3.2-1B");     // hf_checkpoint.h
//   at::Tensor logits = model->forward(ids);                             // [B, T, vocab]
//   at::Tensor loss = zeroshard::models::causal_lm_loss(logits, labels);  // -100: ignored

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "zeroshard/models/llama_config.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/engine/unit.h"

namespace zeroshard::models {

struct LlamaOptions {
  LlamaConfig config;
  c10::Device device = c10::kCPU;  // where parameters live (the meta device is a UsageError)
  bool checkpoint_layers = false;  // recompute every decoder layer in backward (activation checkpointing)
};

class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(LlamaRMSNorm);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& c);
  // x [B, T, hidden]; cos, sin [B, T, head_dim]; allowed: undefined (causal) or bool [B, 1, T, T]
  // (true where a query may attend to a key).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& allowed);
  int64_t heads, kv_heads, head_dim;
  lora::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x);
  lora::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaOptions& o);
  at::Tensor forward(at::Tensor x, at::Tensor cos, at::Tensor sin, c10::optional<at::Tensor> allowed);
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
};

// Hugging Face's LlamaModel: embeddings, the decoder layers, the final norm.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaOptions& o);
  // Hidden states after the final norm, [B, T, hidden]. See LlamaForCausalLMImpl::forward.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& position_ids = {}, const at::Tensor& document_ids = {});
  LlamaOptions options;
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<Unit<LlamaDecoderLayerImpl>> units;  // the same modules as `layers`
  LlamaRMSNorm norm{nullptr};
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  explicit LlamaForCausalLMImpl(const LlamaOptions& o);
  // ids: int64 [B, T]. position_ids: int64 [B, T] or undefined (0, 1, ... per sequence, or per
  // document when document_ids are given). document_ids: int64 [B, T] or undefined: packed
  // sequences, where a token attends only to earlier tokens of its own document. Returns logits
  // [B, T, vocab_size] in the compute dtype. UsageError for bad shapes or dtypes; ConfigError when
  // the config's sliding window would apply to T.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& position_ids = {}, const at::Tensor& document_ids = {});
  const LlamaConfig& config() const { return model->options.config; }
  LlamaModel model{nullptr};
  // untied: a projection of its own (lora::Linear "lm_head"); tied: a module whose "weight" is
  // model.embed_tokens.weight.
  std::shared_ptr<torch::nn::Module> lm_head;
  at::Tensor lm_head_weight() const;
};
TORCH_MODULE(LlamaForCausalLM);

// Hugging Face's causal-LM loss: logits[:, t] predicts labels[:, t + 1]; labels -100 are ignored
// (masked prompt tokens, padding); the mean over the rest, in fp32. NaN when nothing is left.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);
// Per-position negative log-likelihoods of the same shifted pairs, fp32 [B, T - 1], 0 where ignored.
at::Tensor causal_lm_token_nll(const at::Tensor& logits, const at::Tensor& labels);

// fp32 inverse frequencies [head_dim / 2] of the rotary embeddings, as Hugging Face computes them
// (rope_theta, then rope_scaling).
at::Tensor rope_inverse_frequencies(const LlamaConfig& c);

}  // namespace zeroshard::models
