// SPDX-License-Identifier: Apache-2.0
// The Llama-family decoder (llama.h): modules, rotary embeddings, attention, the causal-LM loss.

#include "zeroshard/models/llama.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "zeroshard/base/error.h"
#include "zeroshard/engine/activation_checkpoint.h"

// LibTorch 2.0 has the fused attention (flash / memory-efficient kernels where they apply).
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#define ZS_HAVE_SDPA 1
#else
#define ZS_HAVE_SDPA 0
#endif

namespace zeroshard::models {
namespace {

namespace F = torch::nn::functional;

// LibTorch moves a built module's parameters with Tensor::set_data, which cannot change a CPU
// tensor into a meta one: a model without memory is built sharded (ShardedInit) instead.
void check_device(const LlamaOptions& o) {
  ZS_REQUIRE(o.device.type() != c10::DeviceType::Meta, UsageError,
             "a Llama model cannot be built on the meta device (LibTorch moves parameters with set_data, which "
             "cannot turn a CPU tensor into a meta one); build it under a zeroshard::ShardedInit so no rank holds "
             "the whole model, or use hf_tensors(config) for its names and shapes");
}

lora::Linear linear(int64_t in, int64_t out, bool bias) {
  return lora::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// Hugging Face's _init_weights for a linear layer.
void init_linear(lora::Linear& l, double std) {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(l->weight, 0.0, std);
  if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// [B, H_kv, T, D] -> [B, H_kv * n_rep, T, D]: kv head h serves query heads h * n_rep ... .
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, h, n_rep, t, d}).reshape({b, h * n_rep, t, d});
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed) {
#if ZS_HAVE_SDPA
  return at::scaled_dot_product_attention(
      q, k, v, allowed.defined() ? c10::optional<at::Tensor>(allowed) : c10::nullopt, 0.0, !allowed.defined());
#else
  const int64_t t = q.size(2);
  at::Tensor scores = q.matmul(k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  at::Tensor mask = allowed.defined()
                        ? allowed.logical_not()
                        : at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return at::softmax(scores, -1, at::kFloat).to(q.scalar_type()).matmul(v);
#endif
}

// Positions 0, 1, ... within each document (a run of equal ids) of each row.
at::Tensor positions_in_documents(const at::Tensor& docs) {
  const int64_t t = docs.size(1);
  at::Tensor index = at::arange(t, docs.options()).expand_as(docs);
  at::Tensor starts = at::ones_like(docs, docs.options().dtype(at::kBool));
  if (t > 1) starts.narrow(1, 1, t - 1).copy_(docs.narrow(1, 1, t - 1) != docs.narrow(1, 0, t - 1));
  // The index of each token's document start: a running maximum of start indices.
  at::Tensor start_index = at::where(starts, index, at::zeros_like(index));
  return index - std::get<0>(start_index.cummax(1));
}

void check_ids(const char* what, const at::Tensor& t, const at::Tensor& ids) {
  if (!t.defined()) return;
  ZS_REQUIRE(t.scalar_type() == at::kLong && t.sizes() == ids.sizes(), UsageError, "Llama forward: ", what,
             " must be int64 of the input ids' shape ", ids.sizes(), ", got ", c10::toString(t.scalar_type()), " ",
             t.sizes());
}

}  // namespace

// ---- modules ----

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (h * at::rsqrt(variance + eps)).to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
  q_proj = register_module("q_proj", linear(c.hidden_size, c.q_size(), c.qkv_bias));
  k_proj = register_module("k_proj", linear(c.hidden_size, c.kv_size(), c.qkv_bias));
  v_proj = register_module("v_proj", linear(c.hidden_size, c.kv_size(), c.qkv_bias));
  o_proj = register_module("o_proj", linear(c.q_size(), c.hidden_size, c.o_bias));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                       const at::Tensor& allowed) {
  const int64_t b = x.size(0), t = x.size(1);
  auto heads_of = [&](const at::Tensor& y, int64_t n) { return y.view({b, t, n, head_dim}).transpose(1, 2); };
  at::Tensor q = heads_of(q_proj(x), heads), k = heads_of(k_proj(x), kv_heads), v = heads_of(v_proj(x), kv_heads);
  const at::Tensor c = cos.unsqueeze(1).to(q.scalar_type()), s = sin.unsqueeze(1).to(q.scalar_type());
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;
  const at::Tensor y = attend(q, repeat_kv(k, heads / kv_heads), repeat_kv(v, heads / kv_heads), allowed);
  return o_proj(y.transpose(1, 2).contiguous().view({b, t, heads * head_dim}));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& c) {
  gate_proj = register_module("gate_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module("up_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj = register_module("down_proj", linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) { return down_proj(F::silu(gate_proj(x)) * up_proj(x)); }

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaOptions& o) {
  const LlamaConfig& c = o.config;
  input_layernorm = register_module("input_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", LlamaAttention(c));
  post_attention_layernorm = register_module("post_attention_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
  mlp = register_module("mlp", LlamaMLP(c));
  {
    for (lora::Linear* l : {&self_attn->q_proj, &self_attn->k_proj, &self_attn->v_proj, &self_attn->o_proj,
                            &mlp->gate_proj, &mlp->up_proj, &mlp->down_proj}) {
      init_linear(*l, c.initializer_range);
    }
  }
  to(o.device);  // before a ShardedInit shards this unit
}

at::Tensor LlamaDecoderLayerImpl::forward(at::Tensor x, at::Tensor cos, at::Tensor sin,
                                          c10::optional<at::Tensor> allowed) {
  const at::Tensor mask = allowed ? *allowed : at::Tensor();
  x = x + self_attn(input_layernorm(x), cos, sin, mask);
  return x + mlp(post_attention_layernorm(x));
}

LlamaModelImpl::LlamaModelImpl(const LlamaOptions& o) : options(o) {
  check_device(o);
  const LlamaConfig& c = o.config;
  auto emb = torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size);
  const bool pad = c.pad_token_id && *c.pad_token_id >= 0 && *c.pad_token_id < c.vocab_size;
  if (pad) emb.padding_idx(*c.pad_token_id);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(emb));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(embed_tokens->weight, 0.0, c.initializer_range);
    if (pad) embed_tokens->weight[*c.pad_token_id].zero_();
  }
  embed_tokens->to(o.device);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    units.emplace_back(o);  // sharded here under a ShardedInit
    layers->push_back(units.back().ptr());
  }
  norm = register_module("norm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
  norm->to(o.device);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& ids, const at::Tensor& position_ids,
                                   const at::Tensor& document_ids) {
  ZS_REQUIRE(ids.dim() == 2 && ids.scalar_type() == at::kLong, UsageError,
             "Llama forward: input ids must be int64 [batch, tokens], got ", c10::toString(ids.scalar_type()), " ",
             ids.sizes());
  check_ids("position_ids", position_ids, ids);
  check_ids("document_ids", document_ids, ids);
  const int64_t t = ids.size(1);
  options.config.check_sequence_length(t);
  at::Tensor pos = position_ids.defined()   ? position_ids
                   : document_ids.defined() ? positions_in_documents(document_ids)
                                            : at::arange(t, ids.options()).expand_as(ids);
  // cos/sin as Hugging Face's rotary embedding: fp32 angles position * inverse frequency.
  const at::Tensor inv = rope_inverse_frequencies(options.config).to(ids.device());
  const at::Tensor freqs = pos.to(at::kFloat).unsqueeze(-1) * inv;
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  const at::Tensor cos = emb.cos(), sin = emb.sin();
  c10::optional<at::Tensor> allowed;
  if (document_ids.defined()) {
    const at::Tensor causal = at::ones({t, t}, ids.options().dtype(at::kBool)).tril();
    allowed = (document_ids.unsqueeze(2) == document_ids.unsqueeze(1)).logical_and(causal).unsqueeze(1);
  }
  at::Tensor x = embed_tokens(ids);
  // With a frozen embedding (LoRA) the layers' input needs no gradient, but a checkpointed layer
  // back-propagates only through an input that requires one (as PEFT's enable_input_require_grads).
  if (options.checkpoint_layers && c10::GradMode::is_enabled() && !x.requires_grad()) x.requires_grad_(true);
  for (Unit<LlamaDecoderLayerImpl> layer : units) {
    if (options.checkpoint_layers) {
      x = checkpoint([layer, cos, sin, allowed](const at::Tensor& h) mutable { return layer(h, cos, sin, allowed); },
                     x);
    } else {
      x = layer(x, cos, sin, allowed);
    }
  }
  return norm(x);
}

namespace {
struct TiedHeadImpl : torch::nn::Module {
  explicit TiedHeadImpl(const at::Tensor& w) { register_parameter("weight", w); }
};
}  // namespace

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaOptions& o) {
  model = register_module("model", LlamaModel(o));
  const LlamaConfig& c = o.config;
  if (c.tie_word_embeddings) {
    lm_head = register_module("lm_head", std::make_shared<TiedHeadImpl>(model->embed_tokens->weight));
  } else {
    lora::Linear head = linear(c.hidden_size, c.vocab_size, false);
    init_linear(head, c.initializer_range);
    head->to(o.device);
    lm_head = register_module("lm_head", head.ptr());
  }
}

at::Tensor LlamaForCausalLMImpl::lm_head_weight() const { return lm_head->named_parameters(false)["weight"]; }

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& ids, const at::Tensor& position_ids,
                                         const at::Tensor& document_ids) {
  const at::Tensor h = model->forward(ids, position_ids, document_ids);
  if (auto* head = dynamic_cast<lora::LinearImpl*>(lm_head.get())) return head->forward(h);
  return F::linear(h, lm_head_weight());
}

// ---- rotary frequencies and the loss ----

at::Tensor rope_inverse_frequencies(const LlamaConfig& c) {
  const int64_t dim = c.head_dim;
  at::Tensor inv =
      at::pow(c.rope_theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim)).reciprocal();
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kLinear) return inv / r.factor;
  if (r.type != RopeScaling::Type::kLlama3) return inv;
  const double old = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
  const at::Tensor wavelen = (2 * M_PI) / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / r.factor, inv);
  const at::Tensor smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const at::Tensor medium = (wavelen < high_wavelen).logical_not().logical_and((wavelen > low_wavelen).logical_not());
  return at::where(medium, smoothed, scaled);
}

at::Tensor causal_lm_token_nll(const at::Tensor& logits, const at::Tensor& labels) {
  ZS_REQUIRE(logits.dim() == 3 && labels.dim() == 2 && labels.scalar_type() == at::kLong &&
                 logits.size(0) == labels.size(0) && logits.size(1) == labels.size(1),
             UsageError, "causal LM loss: logits [B, T, vocab] and int64 labels [B, T] expected, got ", logits.sizes(),
             " and ", c10::toString(labels.scalar_type()), " ", labels.sizes());
  const int64_t b = logits.size(0), t = logits.size(1), v = logits.size(2);
  if (t < 2) return at::zeros({b, 0}, logits.options().dtype(at::kFloat));
  const at::Tensor l = logits.narrow(1, 0, t - 1).to(at::kFloat).reshape({-1, v});
  const at::Tensor y = labels.narrow(1, 1, t - 1).reshape({-1});
  return at::cross_entropy_loss(l, y, {}, at::Reduction::None, -100).view({b, t - 1});
}

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  const at::Tensor nll = causal_lm_token_nll(logits, labels);
  const at::Tensor kept = labels.narrow(1, 1, std::max<int64_t>(labels.size(1) - 1, 0)) != -100;
  return nll.sum() / kept.sum().to(at::kFloat);
}

}  // namespace zeroshard::models
