// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Llama family's config.json (Hugging Face's LlamaConfig, MistralConfig, Qwen2Config) as a
// plain struct: every key that changes the math is read and checked; keys known to be harmless
// (torch_dtype, architectures, token ids, transformers_version, ...) are accepted; anything else,
// an unknown model_type, rope_scaling type or hidden_act, or a feature zeroshard does not
// implement, is a ConfigError naming the file and the key. Defaults where a key is absent are
// Hugging Face's for that model_type; the shape keys (vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads) are required.
//
//   auto cfg = zeroshard::models::LlamaConfig::read("Llama-3.2-1B");   // a directory or a file
//   cfg.check_sequence_length(4096);   // ConfigError if sliding-window attention would apply

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::models {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;  // linear and llama3
  // llama3: inverse frequencies rescaled by wavelength against the original context.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};
const char* to_string(RopeScaling::Type t);

struct LlamaConfigOptions {
  // Extra top-level keys to accept as harmless (the caller vouches that they do not change the math).
  std::vector<std::string> ignore_keys;
};

struct LlamaConfig {
  std::string path;        // the config.json read (named in errors)
  std::string model_type;  // "llama", "mistral", "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // llama: attention_bias; qwen2: always
  bool o_bias = false;    // llama: attention_bias
  bool mlp_bias = false;  // llama: mlp_bias
  // The window of sliding-window attention where the config enables it (mistral's sliding_window,
  // qwen2's use_sliding_window): zeroshard runs full attention, so sequences must fit in it.
  std::optional<int64_t> sliding_window;
  std::string sliding_window_key;                                   // the key that enables it, for messages
  std::optional<int64_t> pad_token_id, bos_token_id, eos_token_id;  // eos: the first of a list

  // `path`: config.json or the directory holding it.
  static LlamaConfig read(const std::string& path, const LlamaConfigOptions& options = {});
  // `text`: config.json's contents; `path` names it in errors.
  static LlamaConfig parse(const std::string& text, const std::string& path, const LlamaConfigOptions& options = {});

  // ConfigError naming the key when sliding-window attention would apply to `tokens` positions.
  void check_sequence_length(int64_t tokens) const;
  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

}  // namespace zeroshard::models
