// SPDX-License-Identifier: Apache-2.0
// Hugging Face directory -> GGUF (gguf_export.h): config keys, tokenizer, then the tensors one by one.

#include "zeroshard/models/gguf_export.h"
#include "zeroshard/models/gguf_vocabulary.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"
#include "zeroshard/formats/tensor_dir.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama_checkpoint.h"

namespace zeroshard::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

// One tensor of the GGUF file: where its data comes from and how it is changed on the way.
struct Planned {
  std::string gguf_name;
  std::string hf_name;  // "" for tensors computed from the config (rope_freqs)
  std::vector<int64_t> shape;
  gguf::TensorType type;
  std::function<at::Tensor(at::Tensor)> transform;  // may be empty
};

gguf::TensorType matrix_type(GgufDtype d) {
  switch (d) {
    case GgufDtype::kF32: return gguf::TensorType::kF32;
    case GgufDtype::kF16: return gguf::TensorType::kF16;
    case GgufDtype::kQ8_0: return gguf::TensorType::kQ8_0;
  }
  return gguf::TensorType::kF32;
}

uint32_t file_type(GgufDtype d) {  // llama.cpp's general.file_type: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0
  return d == GgufDtype::kF32 ? 0 : d == GgufDtype::kF16 ? 1 : 7;
}

// HF name pieces -> llama.cpp's names inside a block.
const std::vector<std::pair<std::string, std::string>> kBlockNames = {
    {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},           {"mlp.down_proj", "ffn_down"}};

std::string gguf_name_of(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);  // e.g. "self_attn.q_proj.weight"
  const size_t last = rest.rfind('.');
  for (const auto& [from, to] : kBlockNames) {
    if (rest.substr(0, last) == from) return "blk." + layer + "." + to + rest.substr(last);
  }
  ZS_THROW(Error, "no GGUF name for Hugging Face tensor '", hf, "'");
}

std::vector<Planned> plan(const LlamaConfig& c, bool permute_qk, GgufDtype dtype) {
  std::vector<Planned> out;
  for (const TensorInfo& t : hf_tensors(c)) {
    Planned p{
        gguf_name_of(t.name), t.name, t.shape, t.shape.size() == 2 ? matrix_type(dtype) : gguf::TensorType::kF32, {}};
    if (permute_qk && t.name.find(".self_attn.q_proj.") != std::string::npos) {
      p.transform = [h = c.num_attention_heads](at::Tensor w) { return permute_for_interleaved_rope(w, h); };
    } else if (permute_qk && t.name.find(".self_attn.k_proj.") != std::string::npos) {
      p.transform = [h = c.num_key_value_heads](at::Tensor w) { return permute_for_interleaved_rope(w, h); };
    }
    out.push_back(std::move(p));
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    out.push_back({"rope_freqs.weight", "", {c.head_dim / 2}, gguf::TensorType::kF32, {}});
  }
  return out;
}

void add_hyperparameters(gguf::Writer& w, const LlamaConfig& c, const std::string& arch) {
  auto u32 = [&](const std::string& key, int64_t v) {
    w.add(arch + "." + key, gguf::Value::uint32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& key, double v) {
    w.add(arch + "." + key, gguf::Value::float32(static_cast<float>(v)));
  };
  u32("vocab_size", c.vocab_size);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.num_hidden_layers);
  u32("feed_forward_length", c.intermediate_size);
  u32("attention.head_count", c.num_attention_heads);
  u32("attention.head_count_kv", c.num_key_value_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  f32("rope.freq_base", c.rope_theta);
  u32("rope.dimension_count", c.head_dim);
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    w.add(arch + ".rope.scaling.type", gguf::Value::string("linear"));
    f32("rope.scaling.factor", c.rope_scaling.factor);
  }
}

gguf::Vocabulary vocabulary_for(const LlamaConfig& c, const GgufExportOptions& o) {
  if (o.vocabulary) {
    ZS_REQUIRE(o.vocabulary->size() == c.vocab_size, UsageError, "GGUF export: the vocabulary has ",
               o.vocabulary->size(), " tokens but '", c.path, "' has vocab_size ", c.vocab_size);
    return *o.vocabulary;
  }
  if (!o.tokenizer.empty()) return gguf_vocabulary(o.tokenizer, c.vocab_size);
  gguf::Vocabulary v = gguf::byte_level_vocabulary(c.vocab_size);
  auto id = [&](const std::optional<int64_t>& x) -> std::optional<uint32_t> {
    if (x && *x >= 0 && *x < c.vocab_size) return static_cast<uint32_t>(*x);
    return std::nullopt;
  };
  v.bos_id = id(c.bos_token_id);
  v.eos_id = id(c.eos_token_id);
  v.pad_id = id(c.pad_token_id);
  return v;
}

at::Tensor read_whole(TensorFile& dir, const Planned& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  at::Tensor t = at::empty({n}, at::kFloat);
  dir.read(p.hf_name, 0, n, t);
  t = t.view(p.shape);
  return p.transform ? p.transform(t) : t;
}

}  // namespace

GgufDtype gguf_dtype_from_string(const std::string& s) {
  if (s == "f32") return GgufDtype::kF32;
  if (s == "f16") return GgufDtype::kF16;
  if (s == "q8_0") return GgufDtype::kQ8_0;
  ZS_THROW(UsageError, "GGUF dtype '", s, "' is not one of f32, f16, q8_0");
}

at::Tensor permute_for_interleaved_rope(const at::Tensor& w, int64_t heads) {
  ZS_REQUIRE(w.size(0) % (2 * heads) == 0, UsageError, "permuting rows for interleaved RoPE: ", w.size(0),
             " rows are not ", heads, " heads of an even size");
  std::vector<int64_t> split = {heads, 2, w.size(0) / heads / 2};
  for (int64_t d = 1; d < w.dim(); ++d) split.push_back(w.size(d));
  return w.reshape(split).transpose(1, 2).reshape(w.sizes());
}

at::Tensor llama3_rope_factors(const LlamaConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  const int64_t dim = c.head_dim;
  const at::Tensor freqs =
      at::pow(c.rope_theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim)).reciprocal();
  const double old = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < freqs.numel(); ++i) {
    const double wavelen = 2 * kPi / static_cast<double>(freqs[i].item<float>());
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  return at::tensor(factors, at::kFloat);
}

std::string directory_name(const std::string& path) {
  return std::filesystem::path(path).lexically_normal().filename().string();
}

GgufExportReport export_gguf(const std::string& hf_dir, const std::string& out, const GgufExportOptions& o) {
  const LlamaConfig c = LlamaConfig::read(hf_dir, o.config);
  std::unique_ptr<TensorDirectory> dir = TensorDirectory::open(hf_dir);
  if (o.vocabulary || !o.tokenizer.empty() || !has_tokenizer_files(hf_dir)) return export_gguf(c, *dir, out, o);
  GgufExportOptions with_tokenizer = o;
  with_tokenizer.tokenizer = hf_dir;
  return export_gguf(c, *dir, out, with_tokenizer);
}

GgufExportReport export_gguf_from_checkpoint(const std::string& ckpt, const std::string& out,
                                             const GgufExportOptions& options) {
  const LlamaCheckpoint ck = LlamaCheckpoint::open(ckpt, options.config);
  ckpt::CheckpointTensors weights(ck.dir, ckpt::CheckpointTensors::Options{/*merge_lora=*/true});
  GgufExportOptions o = options;
  if (o.name.empty()) o.name = directory_name(std::filesystem::path(ck.dir).parent_path().string());
  GgufExportReport r = export_gguf(ck.config, weights, out, o);
  weights.check_rest();
  return r;
}

GgufExportReport export_gguf(const LlamaConfig& c, TensorFile& weights, const std::string& out,
                             const GgufExportOptions& o) {
  check_hf_checkpoint(c, weights);
  GgufExportReport r;
  r.architecture = c.model_type == "qwen2" ? "qwen2" : "llama";
  if (!o.vocabulary) r.tokenizer = o.tokenizer;
  const gguf::Vocabulary vocab = vocabulary_for(c, o);
  const std::vector<Planned> tensors = plan(c, r.architecture == "llama", o.dtype);
  gguf::Writer w(out);
  w.add("general.architecture", gguf::Value::string(r.architecture));
  const std::string name = o.name.empty() ? directory_name(weights.path()) : o.name;
  w.add("general.name", gguf::Value::string(name.empty() ? "model" : name));
  w.add("general.file_type", gguf::Value::uint32(file_type(o.dtype)));
  if (o.dtype == GgufDtype::kQ8_0) w.add("general.quantization_version", gguf::Value::uint32(2));
  add_hyperparameters(w, c, r.architecture);
  vocab.write_to(w);
  for (const Planned& p : tensors) w.declare(p.gguf_name, p.shape, p.type);
  for (const Planned& p : tensors) {
    w.write(p.gguf_name, p.hf_name.empty() ? llama3_rope_factors(c) : read_whole(weights, p));
    ++r.tensors;
  }
  w.finish();
  r.bytes = w.bytes_written();
  return r;
}

}  // namespace zeroshard::models
