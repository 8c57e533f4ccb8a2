// SPDX-License-Identifier: Apache-2.0
// config.json of the Llama family (llama_config.h), read with nlohmann-json: every key is either
// read, accepted as harmless, or a ConfigError naming the file and the key.

#include "zeroshard/models/llama_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard::models {
namespace {

using Json = nlohmann::json;

// clang-format off
// Keys that do not change the forward or backward math of the model: bookkeeping, generation
// defaults, output switches, token ids (read where they matter).
const std::set<std::string> kHarmless = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "return_dict",
    "output_attentions", "output_hidden_states", "torchscript", "use_return_dict", "attn_implementation",
    "_attn_implementation", "_attn_implementation_autoset", "tokenizer_class", "id2label", "label2id",
    "problem_type", "task_specific_params", "finetuning_task", "prefix", "is_decoder", "is_encoder_decoder",
    "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward", "pretraining_tp", "max_length",
    "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature",
    "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "tf_legacy_loss",
    "use_bfloat16", "initializer_range"};

// The keys each model_type reads (besides the harmless ones).
const std::set<std::string> kMathKeys = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "attention_dropout", "layer_types"};
const std::set<std::string> kLlamaKeys = {"attention_bias", "mlp_bias"};
const std::set<std::string> kMistralKeys = {"sliding_window"};
const std::set<std::string> kQwen2Keys = {"use_sliding_window", "sliding_window", "max_window_layers"};
// clang-format on

// The members of one JSON object, read with checks; errors name the file and the key (under
// `prefix`, e.g. "rope_scaling.").
class Keys {
 public:
  Keys(const Json& j, std::string path, std::string prefix = "")
      : j_(j), path_(std::move(path)), prefix_(std::move(prefix)) {}
  const std::string& path() const { return path_; }

  const Json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  bool present(const std::string& key) const {
    const Json* v = find(key);
    return v != nullptr && !v->is_null();
  }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    ZS_THROW(ConfigError, "'", path_, "': key '", prefix_, key, "' ", what);
  }
  int64_t positive(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr || v->is_null()) bad(key, "is missing");
    if (!v->is_number_integer() || v->get<int64_t>() <= 0) bad(key, "must be a positive integer, got " + v->dump());
    return v->get<int64_t>();
  }
  int64_t positive_or(const std::string& key, int64_t fallback) const {
    return present(key) ? positive(key) : fallback;
  }
  double number_or(const std::string& key, double fallback, bool must_be_positive = true) const {
    if (!present(key)) return fallback;
    const Json& v = *find(key);
    if (!v.is_number() || (must_be_positive && v.get<double>() <= 0)) {
      bad(key, std::string("must be a ") + (must_be_positive ? "positive " : "") + "number, got " + v.dump());
    }
    return v.get<double>();
  }
  bool flag_or(const std::string& key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!find(key)->is_boolean()) bad(key, "must be true or false, got " + find(key)->dump());
    return find(key)->get<bool>();
  }
  std::optional<int64_t> token_id(const std::string& key) const {
    if (!present(key)) return std::nullopt;
    const Json& v = *find(key);
    const Json& first = v.is_array() && !v.empty() ? v.front() : v;  // eos_token_id may be a list
    if (!first.is_number_integer()) bad(key, "must be a token id (an integer or a list of them), got " + v.dump());
    return first.get<int64_t>();
  }

 private:
  const Json& j_;
  std::string path_, prefix_;
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

void check_keys(const Json& j, const std::string& path, const std::string& model_type, const LlamaConfigOptions& o) {
  const std::set<std::string>& own =
      model_type == "llama" ? kLlamaKeys : (model_type == "mistral" ? kMistralKeys : kQwen2Keys);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (kHarmless.count(k) || kMathKeys.count(k) || own.count(k)) continue;
    if (std::find(o.ignore_keys.begin(), o.ignore_keys.end(), k) != o.ignore_keys.end()) continue;
    ZS_THROW(ConfigError, "'", path, "': key '", k, "' is not one zeroshard knows for model_type ", quoted(model_type),
             ": it may change the model's math (if it does not, accept it with LlamaConfigOptions::ignore_keys, "
             "--ignore-config-key ",
             k, ")");
  }
}

// rope_scaling (transformers' older key) or rope_parameters (its newer one, which also carries
// rope_theta). `where` is the key, for messages.
void read_rope(const Json& r, const std::string& where, const std::string& path, LlamaConfig& c) {
  if (r.is_null()) return;
  if (!r.is_object())
    ZS_THROW(ConfigError, "'", path, "': key '", where, "' must be an object or null, got ", r.dump());
  Keys k(r, path, where + ".");
  const std::string type_key = r.contains("rope_type") ? "rope_type" : "type";
  const Json* t = k.find(type_key);
  if (t != nullptr && !t->is_null() && !t->is_string()) k.bad(type_key, "must be a string, got " + t->dump());
  const std::string type = t != nullptr && t->is_string() ? t->get<std::string>() : "default";
  std::set<std::string> known = {"rope_type", "type", "rope_theta"};
  auto param = [&](const std::string& name, double fallback, bool required) {
    known.insert(name);
    if (required && !k.present(name)) k.bad(name, "is missing (rope type " + quoted(type) + " needs it)");
    return k.number_or(name, fallback);
  };
  if (r.contains("rope_theta")) c.rope_theta = param("rope_theta", c.rope_theta, false);
  if (type == "default") {
    c.rope_scaling = {};
  } else if (type == "linear") {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = param("factor", 1.0, true);
  } else if (type == "llama3") {
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.factor = param("factor", 1.0, true);
    c.rope_scaling.low_freq_factor = param("low_freq_factor", 1.0, true);
    c.rope_scaling.high_freq_factor = param("high_freq_factor", 4.0, true);
    c.rope_scaling.original_max_position_embeddings =
        static_cast<int64_t>(param("original_max_position_embeddings", 0, true));
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor) {
      k.bad("high_freq_factor", "must be above low_freq_factor");
    }
  } else {
    k.bad(type_key,
          "= " + quoted(type) + " is not implemented (zeroshard implements \"default\", \"linear\" and \"llama3\")");
  }
  for (auto it = r.begin(); it != r.end(); ++it) {
    if (!known.count(it.key())) {
      k.bad(it.key(), "is not one zeroshard knows for rope type " + quoted(type) + ": it may change the model's math");
    }
  }
}

// Where the config turns on sliding-window attention: the window and the key that does it.
void read_sliding_window(const Keys& k, LlamaConfig& c, const Json& j) {
  if (c.model_type == "llama") return;
  const int64_t window = k.positive_or("sliding_window", 4096);
  const bool null_window = k.find("sliding_window") != nullptr && k.find("sliding_window")->is_null();
  if (k.present("layer_types")) {
    const Json& types = j.at("layer_types");
    bool sliding = false;
    if (!types.is_array()) k.bad("layer_types", "must be a list, got " + types.dump());
    for (const Json& t : types) {
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
        k.bad("layer_types", "must list \"full_attention\" or \"sliding_attention\" per layer, got " + t.dump());
      }
      sliding |= t == "sliding_attention";
    }
    if (sliding && !null_window) c.sliding_window = window, c.sliding_window_key = "layer_types";
    return;
  }
  if (c.model_type == "mistral") {
    if (!null_window) c.sliding_window = window, c.sliding_window_key = "sliding_window";
    return;
  }
  // qwen2: layers from max_window_layers on use the window when use_sliding_window is set.
  const bool use = k.flag_or("use_sliding_window", false);
  const int64_t first = k.present("max_window_layers") ? k.positive("max_window_layers") : 28;
  if (use && !null_window && first < c.num_hidden_layers)
    c.sliding_window = window, c.sliding_window_key = "use_sliding_window";
}

void check_shapes(const LlamaConfig& c, const Keys& k) {
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    k.bad("num_key_value_heads", "= " + std::to_string(c.num_key_value_heads) +
                                     " must divide num_attention_heads = " + std::to_string(c.num_attention_heads));
  }
  if (!k.present("head_dim") && c.hidden_size % c.num_attention_heads != 0) {
    k.bad("num_attention_heads", "= " + std::to_string(c.num_attention_heads) + " must divide hidden_size = " +
                                     std::to_string(c.hidden_size) + " (or give head_dim)");
  }
  if (c.head_dim % 2 != 0) k.bad("head_dim", "= " + std::to_string(c.head_dim) + " must be even (rotary embeddings)");
}

}  // namespace

const char* to_string(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::kNone: return "default";
    case RopeScaling::Type::kLinear: return "linear";
    case RopeScaling::Type::kLlama3: return "llama3";
  }
  return "?";
}

LlamaConfig LlamaConfig::parse(const std::string& text, const std::string& path, const LlamaConfigOptions& options) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {  // a syntax error, or a number out of range ("1e999")
    ZS_THROW(ConfigError, "'", path, "' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) ZS_THROW(ConfigError, "'", path, "' is not a JSON object");
  Keys k(j, path);
  LlamaConfig c;
  c.path = path;
  if (!k.present("model_type"))
    k.bad("model_type", "is missing (zeroshard implements \"llama\", \"mistral\" and \"qwen2\")");
  if (!j.at("model_type").is_string()) k.bad("model_type", "must be a string, got " + j.at("model_type").dump());
  c.model_type = j.at("model_type").get<std::string>();
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2") {
    ZS_THROW(ConfigError, "'", path, "': model_type ", quoted(c.model_type),
             " is not supported (zeroshard implements \"llama\", \"mistral\" and \"qwen2\")");
  }
  check_keys(j, path, c.model_type, options);
  c.vocab_size = k.positive("vocab_size");
  c.hidden_size = k.positive("hidden_size");
  c.intermediate_size = k.positive("intermediate_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.num_attention_heads = k.positive("num_attention_heads");
  // MistralConfig's default is 8 key/value heads; null (and the other families' default): one per head.
  const bool mistral_default = c.model_type == "mistral" && k.find("num_key_value_heads") == nullptr;
  c.num_key_value_heads = k.positive_or("num_key_value_heads", mistral_default ? 8 : c.num_attention_heads);
  c.head_dim = k.positive_or("head_dim", c.hidden_size / c.num_attention_heads);
  check_shapes(c, k);
  const int64_t default_positions = c.model_type == "llama" ? 2048 : c.model_type == "mistral" ? 4096 * 32 : 32768;
  c.max_position_embeddings = k.positive_or("max_position_embeddings", default_positions);
  c.rms_norm_eps = k.number_or("rms_norm_eps", 1e-6);
  c.rope_theta = k.number_or("rope_theta", 10000.0);
  c.initializer_range = k.number_or("initializer_range", 0.02);
  c.tie_word_embeddings = k.flag_or("tie_word_embeddings", false);
  if (k.present("hidden_act") && (!j.at("hidden_act").is_string() || j.at("hidden_act") != "silu")) {
    k.bad("hidden_act", "= " + j.at("hidden_act").dump() + " is not implemented (zeroshard implements \"silu\")");
  }
  if (k.number_or("attention_dropout", 0.0, false) != 0.0) {
    k.bad("attention_dropout",
          "= " + j.at("attention_dropout").dump() + " is not implemented (zeroshard implements 0)");
  }
  if (k.find("rope_scaling") != nullptr) read_rope(j.at("rope_scaling"), "rope_scaling", path, c);
  if (k.find("rope_parameters") != nullptr) read_rope(j.at("rope_parameters"), "rope_parameters", path, c);
  if (c.model_type == "llama") {
    c.qkv_bias = c.o_bias = k.flag_or("attention_bias", false);
    c.mlp_bias = k.flag_or("mlp_bias", false);
  } else if (c.model_type == "qwen2") {
    c.qkv_bias = true;
  }
  read_sliding_window(k, c, j);
  c.pad_token_id = k.token_id("pad_token_id");
  c.bos_token_id = k.token_id("bos_token_id");
  c.eos_token_id = k.token_id("eos_token_id");
  return c;
}

LlamaConfig LlamaConfig::read(const std::string& path, const LlamaConfigOptions& options) {
  const std::string file = std::filesystem::is_directory(path) ? path + "/config.json" : path;
  std::ifstream in(file, std::ios::binary);
  ZS_REQUIRE(in.good(), ConfigError, "model config '", file, "' cannot be read (",
             std::filesystem::exists(file) ? "not readable" : "no such file", ")");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), file, options);
}

void LlamaConfig::check_sequence_length(int64_t tokens) const {
  if (!sliding_window || tokens <= *sliding_window) return;
  ZS_THROW(ConfigError, "'", path, "': key '", sliding_window_key, "' turns on sliding-window attention over ",
           *sliding_window, " tokens, which would apply to this sequence of ", tokens,
           " tokens; zeroshard runs full attention only (use sequences of at most ", *sliding_window, " tokens)");
}

}  // namespace zeroshard::models
