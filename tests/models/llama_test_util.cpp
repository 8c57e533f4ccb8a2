// SPDX-License-Identifier: Apache-2.0
#include "llama_test_util.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/models/hf_checkpoint.h"

namespace zs_llama_test {
namespace zs = zeroshard;
namespace fs = std::filesystem;

std::string TinySpec::config_json() const {
  std::ostringstream s;
  s << "{\n  \"architectures\": [\""
    << (model_type == "qwen2"     ? "Qwen2ForCausalLM"
        : model_type == "mistral" ? "MistralForCausalLM"
                                  : "LlamaForCausalLM")
    << "\"],\n  \"model_type\": \"" << model_type << "\",\n  \"vocab_size\": " << vocab
    << ",\n  \"hidden_size\": " << hidden << ",\n  \"intermediate_size\": " << intermediate
    << ",\n  \"num_hidden_layers\": " << layers << ",\n  \"num_attention_heads\": " << heads
    << ",\n  \"num_key_value_heads\": " << kv_heads
    << ",\n  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": " << max_positions
    << ",\n  \"rms_norm_eps\": " << nlohmann::json(rms_eps).dump() << ",\n  \"rope_theta\": "
    << nlohmann::json(rope_theta).dump()
    << ",\n  \"rope_scaling\": " << rope_scaling << ",\n  \"tie_word_embeddings\": " << (tied ? "true" : "false")
    << ",\n  \"initializer_range\": 0.02,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"torch_dtype\": "
       "\"float32\""
    << ",\n  \"transformers_version\": \"4.45.0\"";
  if (model_type == "llama") {
    s << ",\n  \"attention_bias\": " << (attention_bias ? "true" : "false")
      << ",\n  \"mlp_bias\": " << (mlp_bias ? "true" : "false");
  }
  if (!extra.empty()) s << ",\n  " << extra;
  s << "\n}\n";
  return s.str();
}

zs::models::LlamaConfig TinySpec::config() const {
  return zs::models::LlamaConfig::parse(config_json(), "config.json");
}

State random_state(const zs::models::LlamaConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  State out;
  auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  for (const zs::TensorInfo& t : zs::models::hf_tensors(c)) {
    at::Tensor v = at::randn(t.shape, gen, at::TensorOptions().dtype(at::kFloat));
    const std::string& n = t.name;
    if (has(n, "norm.weight")) {
      v = 1 + 0.1 * v;
    } else if (has(n, "embed_tokens")) {
      v = 0.5 * v;
    } else if ((has(n, "q_proj.weight") || has(n, "k_proj.weight") || n == "lm_head.weight")) {
      v = 0.25 * v;
    } else {
      v = 0.1 * v;
    }
    out.emplace_back(n, v);
  }
  return out;
}

void write_hf_dir(const std::string& dir, const std::string& config_json, const State& state, int shards,
                  c10::ScalarType dtype) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  const size_t per = (state.size() + shards - 1) / shards;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (int k = 0; k < shards; ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, shards);
    const std::string file = shards == 1 ? "model.safetensors" : name;
    std::vector<zs::TensorInfo> infos;
    for (size_t i = k * per; i < std::min(state.size(), (k + 1) * per); ++i) {
      infos.push_back({state[i].first, dtype, state[i].second.sizes().vec()});
      weight_map[state[i].first] = file;
    }
    zs::SafetensorsWriter w(dir + "/" + file, infos, {{"format", "pt"}});
    for (size_t i = k * per; i < std::min(state.size(), (k + 1) * per); ++i)
      w.write(state[i].first, state[i].second.to(dtype));
    w.finish();
  }
  if (shards > 1) {
    int64_t total = 0;
    for (const auto& kv : state) total += kv.second.numel() * static_cast<int64_t>(c10::elementSize(dtype));
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump() << "\n";
  }
}

std::vector<int64_t> random_ids(int64_t n, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor t = at::randint(0, 256, {n}, gen, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

at::Tensor unpermute_rows(const at::Tensor& w, int64_t heads) {
  std::vector<int64_t> split = {heads, w.size(0) / heads / 2, 2};
  for (int64_t d = 1; d < w.dim(); ++d) split.push_back(w.size(d));
  return w.reshape(split).transpose(1, 2).reshape(w.sizes());
}

}  // namespace zs_llama_test
