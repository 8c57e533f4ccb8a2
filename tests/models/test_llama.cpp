// SPDX-License-Identifier: Apache-2.0
// The Llama family (zeroshard/models): config.json keys and their errors, Hugging Face's names and
// initialisation, sharded loading of Hugging Face directories (every value exact, each rank
// reading only its shards), packed documents, the loss, LoRA by module name, and every bad input
// with its exact text. At 1 and 2 ranks. The comparisons with llama.cpp and PyTorch are in
// test_llama_clients.cpp.

#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/tensor.h>
#include <torch/nn/functional/loss.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "models/llama_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_dir.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
using zs::test::message_of;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;
using zs_llama_test::State;
using zs_llama_test::TinySpec;

namespace {

std::string config_error(const std::string& json) {
  try {
    zm::LlamaConfig::parse(json, "m/config.json");
  } catch (const zs::ConfigError& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not a ConfigError: ") + e.what() + ">";
  }
  return "<no error>";
}

// A directory every rank sees, written by rank 0.
std::string shared_dir(const std::string& name) {
  const std::string dir = fs::absolute("llama-" + name + "-np" + std::to_string(zs::test::world_size())).string();
  if (zs::test::rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  zs::test::barrier();
  return dir;
}

void write_model(const std::string& dir, const TinySpec& spec, const State& state, int shards,
                 c10::ScalarType dtype = c10::kFloat) {
  if (zs::test::rank() == 0) zs_llama_test::write_hf_dir(dir, spec.config_json(), state, shards, dtype);
  zs::test::barrier();
}

// A model of `c`, built sharded, with the directory's weights.
struct Sharded {
  Sharded(const zm::LlamaConfig& c, const std::string& dir, zs::ShardingOptions o = {})
      : init(zs::test::session(), o), model(zm::LlamaOptions{c}) {
    engine = std::make_unique<zs::ShardingEngine>(init, model.ptr());
    report = zm::load_hf_weights(*engine, c, dir);
  }
  at::Tensor logits(const at::Tensor& ids, const at::Tensor& pos = {}, const at::Tensor& docs = {}) {
    torch::NoGradGuard no_grad;
    return engine->forward([&] { return model->forward(ids, pos, docs); });
  }
  zs::ShardedInit init;
  zm::LlamaForCausalLM model;
  std::unique_ptr<zs::ShardingEngine> engine;
  zs::PretrainedReport report;
};

// The same model unsharded, its parameters copied from `state`.
zm::LlamaForCausalLM plain(const zm::LlamaConfig& c, const State& state) {
  zm::LlamaForCausalLM m(zm::LlamaOptions{c});
  torch::NoGradGuard no_grad;
  auto params = m->named_parameters();
  for (const auto& [k, v] : state) params[k].copy_(v);
  return m;
}

at::Tensor ids_tensor(int64_t n, uint64_t seed) {
  return at::tensor(zs_llama_test::random_ids(n, seed), at::kLong).view({1, -1});
}

// ---- config.json ----

TEST(LlamaConfig, ReadsEveryKeyThatChangesTheMath) {
  const zm::LlamaConfig c = zm::LlamaConfig::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": true,
    "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false, "pretraining_tp": 1,
    "initializer_range": 0.02, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0", "use_cache": true})",
                                                   "m/config.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 24);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, zm::RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.bos_token_id.value_or(-1), 128000);
  EXPECT_EQ(c.eos_token_id.value_or(-1), 128001);
}

TEST(LlamaConfig, DefaultsAreHuggingFacesPerModelType) {
  const std::string shape =
      R"("vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4)";
  const zm::LlamaConfig llama = zm::LlamaConfig::parse("{\"model_type\": \"llama\", " + shape + "}", "c");
  EXPECT_EQ(llama.num_key_value_heads, 4);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_EQ(llama.rms_norm_eps, 1e-6);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_FALSE(llama.tie_word_embeddings);
  const std::string wide =
      R"("vocab_size": 100, "hidden_size": 128, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 16)";
  const zm::LlamaConfig mistral = zm::LlamaConfig::parse("{\"model_type\": \"mistral\", " + wide + "}", "c");
  EXPECT_EQ(mistral.num_key_value_heads, 8);
  EXPECT_EQ(mistral.sliding_window.value_or(0), 4096);
  const zm::LlamaConfig qwen = zm::LlamaConfig::parse("{\"model_type\": \"qwen2\", " + shape + "}", "c");
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_FALSE(qwen.o_bias || qwen.mlp_bias);
  EXPECT_FALSE(qwen.sliding_window.has_value());  // use_sliding_window defaults to false
}

TEST(LlamaConfig, BadKeysAreErrorsNamingTheFileAndTheKey) {
  const std::string shape =
      R"("vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4)";
  auto with = [&](const std::string& type, const std::string& more) {
    return "{\"model_type\": \"" + type + "\", " + shape + (more.empty() ? "" : ", " + more) + "}";
  };
  EXPECT_EQ(config_error(with("gemma", "")),
            "'m/config.json': model_type \"gemma\" is not supported (zeroshard implements \"llama\", \"mistral\" and "
            "\"qwen2\")");
  EXPECT_EQ(config_error("{" + shape + "}"),
            "'m/config.json': key 'model_type' is missing (zeroshard implements \"llama\", \"mistral\" and \"qwen2\")");
  EXPECT_EQ(config_error(with("llama", R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")),
            "'m/config.json': key 'rope_scaling.rope_type' = \"yarn\" is not implemented (zeroshard implements "
            "\"default\", \"linear\" and \"llama3\")");
  EXPECT_EQ(config_error(with("llama", R"("rope_scaling": {"type": "dynamic", "factor": 2.0})")),
            "'m/config.json': key 'rope_scaling.type' = \"dynamic\" is not implemented (zeroshard implements "
            "\"default\", \"linear\" and \"llama3\")");
  EXPECT_EQ(config_error(with("llama", R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})")),
            "'m/config.json': key 'rope_scaling.low_freq_factor' is missing (rope type \"llama3\" needs it)");
  EXPECT_EQ(config_error(with("llama", R"("hidden_act": "gelu")")),
            "'m/config.json': key 'hidden_act' = \"gelu\" is not implemented (zeroshard implements \"silu\")");
  EXPECT_EQ(config_error(with("llama", R"("attention_dropout": 0.1)")),
            "'m/config.json': key 'attention_dropout' = 0.1 is not implemented (zeroshard implements 0)");
  EXPECT_EQ(config_error(with("llama", R"("quantization_config": {"quant_method": "gptq"})")),
            "'m/config.json': key 'quantization_config' is not one zeroshard knows for model_type \"llama\": it may "
            "change the model's math (if it does not, accept it with LlamaConfigOptions::ignore_keys, "
            "--ignore-config-key quantization_config)");
  EXPECT_EQ(config_error(with("mistral", R"("attention_bias": true)")),
            "'m/config.json': key 'attention_bias' is not one zeroshard knows for model_type \"mistral\": it may "
            "change the model's math (if it does not, accept it with LlamaConfigOptions::ignore_keys, "
            "--ignore-config-key attention_bias)");
  EXPECT_EQ(
      config_error(
          R"({"model_type": "llama", "vocab_size": 100, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4})"),
      "'m/config.json': key 'hidden_size' is missing");
  EXPECT_EQ(config_error(with("llama", R"("num_key_value_heads": 3)")),
            "'m/config.json': key 'num_key_value_heads' = 3 must divide num_attention_heads = 4");
  EXPECT_EQ(config_error(with("llama", R"("rms_norm_eps": "small")")),
            "'m/config.json': key 'rms_norm_eps' must be a positive number, got \"small\"");
  EXPECT_TRUE(zs::test::contains(config_error("{\"model_type\": \"llama\", "), "'m/config.json' is not valid JSON: "))
      << config_error("{\"model_type\": \"llama\", ");
}

TEST(LlamaConfig, SlidingWindowIsRefusedWhereItWouldApply) {
  TinySpec mistral;
  mistral.model_type = "mistral";
  mistral.extra = "\"sliding_window\": 32";
  const zm::LlamaConfig c = mistral.config();
  c.check_sequence_length(32);  // the window covers the whole sequence: full attention is exact
  EXPECT_EQ(message_of<zs::ConfigError>([&] { c.check_sequence_length(33); }),
            "'config.json': key 'sliding_window' turns on sliding-window attention over 32 tokens, which would apply "
            "to this sequence of 33 tokens; zeroshard runs full attention only (use sequences of at most 32 tokens)");
  mistral.extra = "\"sliding_window\": null";
  mistral.config().check_sequence_length(100000);
  TinySpec qwen;
  qwen.model_type = "qwen2";
  qwen.extra = "\"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 1";
  EXPECT_EQ(
      message_of<zs::ConfigError>([&] { qwen.config().check_sequence_length(17); }),
      "'config.json': key 'use_sliding_window' turns on sliding-window attention over 16 tokens, which would "
      "apply to this sequence of 17 tokens; zeroshard runs full attention only (use sequences of at most 16 tokens)");
  qwen.extra = "\"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 3";  // no layer uses it
  qwen.config().check_sequence_length(1000);
}

// ---- the model ----

TEST(LlamaModel, ParameterNamesAndShapesAreHuggingFaces) {
  for (bool tied : {false, true}) {
    TinySpec spec;
    spec.tied = tied;
    spec.attention_bias = spec.mlp_bias = !tied;
    const zm::LlamaConfig c = spec.config();
    zm::LlamaForCausalLM m(zm::LlamaOptions{c});
    std::map<std::string, std::vector<int64_t>> got;
    for (const auto& p : m->named_parameters()) got[p.key()] = p.value().sizes().vec();
    std::map<std::string, std::vector<int64_t>> want;
    for (const zs::TensorInfo& t : zm::hf_tensors(c)) want[t.name] = t.shape;
    if (tied) want["lm_head.weight"] = {c.vocab_size, c.hidden_size};
    EXPECT_EQ(got, want);
    if (tied) EXPECT_TRUE(m->lm_head_weight().is_same(m->model->embed_tokens->weight));
  }
  EXPECT_EQ(message_of<zs::UsageError>([] {
              zm::LlamaForCausalLM m(zm::LlamaOptions{TinySpec().config(), c10::kMeta});
            }),
            "a Llama model cannot be built on the meta device (LibTorch moves parameters with set_data, which cannot "
            "turn a CPU tensor into a meta one); build it under a zeroshard::ShardedInit so no rank holds the whole "
            "model, or use hf_tensors(config) for its names and shapes");
}

TEST(LlamaModel, InitialisesLikeHuggingFace) {
  TinySpec spec;
  spec.vocab = 2048;
  spec.attention_bias = true;
  spec.extra = "\"pad_token_id\": 7";
  torch::manual_seed(3);
  zm::LlamaForCausalLM m(zm::LlamaOptions{spec.config()});
  for (const auto& p : m->named_parameters()) {
    const std::string& n = p.key();
    const at::Tensor v = p.value().detach();
    if (n.find("norm") != std::string::npos) {
      EXPECT_TRUE(v.eq(1).all().item<bool>()) << n;
    } else if (n.find(".bias") != std::string::npos) {
      EXPECT_TRUE(v.eq(0).all().item<bool>()) << n;
    } else if (n == "model.embed_tokens.weight") {
      EXPECT_TRUE(v[7].eq(0).all().item<bool>()) << "the padding row";
      EXPECT_NEAR(v.narrow(0, 8, 2040).std().item<double>(), 0.02, 0.0005) << n;
    } else {
      EXPECT_NEAR(v.std().item<double>(), 0.02, 0.002) << n;  // N(0, initializer_range)
      EXPECT_NEAR(v.mean().item<double>(), 0.0, 0.002) << n;
    }
  }
}

TEST(LlamaModel, ShardedLoadOfTwoShardsIsExactAndReadsOnlyThisRanksBytes) {
  const std::string dir = shared_dir("two-shards");
  const TinySpec spec;
  const zm::LlamaConfig c = spec.config();
  const State state = zs_llama_test::random_state(c, 11);
  write_model(dir, spec, state, 2);
  Sharded m(c, dir);
  const auto full = m.engine->full_state_dict();
  for (const auto& [k, v] : state) {
    ASSERT_TRUE(full.count(k)) << k;
    EXPECT_EQ(zs::test::max_abs_diff(full.at(k), v), 0.0) << k;
  }
  int64_t mine = 0;  // this rank's shard elements (padding excluded)
  for (zs::FlatParam* f : zs::detail::flat_params(*m.engine)) {
    const int64_t lo = static_cast<int64_t>(f->shard_group().rank()) * f->shard_numel();
    mine += std::max<int64_t>(0, std::min(lo + f->shard_numel(), f->numel()) - lo);
  }
  EXPECT_EQ(m.report.bytes_read, 4 * mine);
  // The sharded forward equals the plain model's with the same weights.
  const at::Tensor ids = ids_tensor(40, 5);
  zm::LlamaForCausalLM ref = plain(c, state);
  torch::NoGradGuard no_grad;
  EXPECT_LE(zs::test::max_abs_diff(m.logits(ids), ref->forward(ids)), 1e-5);
}

TEST(LlamaModel, LowPrecisionAndSingleFileCheckpoints) {
  const std::string dir = shared_dir("bf16");
  TinySpec spec;
  spec.tied = true;
  const zm::LlamaConfig c = spec.config();
  const State state = zs_llama_test::random_state(c, 12);  // no lm_head.weight: tied, stored once
  for (c10::ScalarType dtype : {c10::kBFloat16, c10::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    write_model(dir, spec, state, 1, dtype);
    if (zs::test::rank() == 0) EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
    Sharded m(c, dir);
    const auto full = m.engine->full_state_dict();
    for (const auto& [k, v] : state)
      EXPECT_EQ(zs::test::max_abs_diff(full.at(k), v.to(dtype).to(at::kFloat)), 0.0) << k;
    EXPECT_EQ(zs::test::max_abs_diff(full.at("lm_head.weight"), full.at("model.embed_tokens.weight")), 0.0);
    zs::test::barrier();
  }
}

TEST(LlamaModel, PackedDocumentsEqualSeparateSequences) {
  TinySpec spec;
  spec.model_type = "qwen2";  // biases too
  const zm::LlamaConfig c = spec.config();
  zm::LlamaForCausalLM m = plain(c, zs_llama_test::random_state(c, 13));
  torch::NoGradGuard no_grad;
  const at::Tensor a = ids_tensor(11, 1), b = ids_tensor(7, 2), d = ids_tensor(5, 3);
  const at::Tensor packed = at::cat({a, b, d}, 1);
  const at::Tensor docs =
      at::cat({at::zeros({1, 11}, at::kLong), at::ones({1, 7}, at::kLong), at::full({1, 5}, 4, at::kLong)}, 1);
  const at::Tensor got = m->forward(packed, {}, docs);
  const at::Tensor want = at::cat({m->forward(a), m->forward(b), m->forward(d)}, 1);
  EXPECT_LE(zs::test::max_abs_diff(got, want), 2e-5);
  // Without the documents the later ones see the earlier: different logits.
  EXPECT_GT(zs::test::max_abs_diff(m->forward(packed), want), 1e-2);
  // Explicit positions equal the implicit ones.
  const at::Tensor pos = at::arange(23, at::kLong).view({1, -1});
  EXPECT_EQ(zs::test::max_abs_diff(m->forward(packed, pos), m->forward(packed)), 0.0);
}

TEST(LlamaModel, LossIsTheMeanOverLabelsThatAreNotIgnored) {
  torch::manual_seed(4);
  const at::Tensor logits = at::randn({2, 6, 9});
  at::Tensor labels = at::randint(0, 9, {2, 6}, at::kLong);
  labels.index_put_({0, at::indexing::Slice(0, 3)}, -100);  // a masked prompt
  labels.index_put_({1, 5}, -100);
  double sum = 0;
  int n = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t + 1 < 6; ++t) {
      const int64_t y = labels[b][t + 1].item<int64_t>();
      if (y == -100) continue;
      sum -= at::log_softmax(logits[b][t], -1)[y].item<double>();
      ++n;
    }
  }
  EXPECT_NEAR(zm::causal_lm_loss(logits, labels).item<double>(), sum / n, 1e-6);
  const at::Tensor nll = zm::causal_lm_token_nll(logits, labels);
  EXPECT_EQ(nll.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(nll[0][0].item<float>(), 0.0f);  // labels[0][1] is ignored
}

TEST(LlamaModel, LoraTargetsHuggingFaceModuleNames) {
  const std::string dir = shared_dir("lora");
  const TinySpec spec;
  const zm::LlamaConfig c = spec.config();
  const State state = zs_llama_test::random_state(c, 14);
  write_model(dir, spec, state, 2);
  const zs::lora::Options lo{4, 8.0, 0.0, {"*.q_proj", "*.v_proj", "*.down_proj"}};
  zs::ShardingOptions so;
  so.unit_hooks.push_back(zs::lora::unit_hook(lo));
  zs::ShardedInit init(zs::test::session(), so);
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  const std::vector<std::string> adapted = zs::lora::adapted_layers(*model);
  std::vector<std::string> want;
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    want.insert(want.end(), {p + "self_attn.q_proj", p + "self_attn.v_proj", p + "mlp.down_proj"});
  }
  EXPECT_EQ(std::set<std::string>(adapted.begin(), adapted.end()), std::set<std::string>(want.begin(), want.end()));
  zm::load_hf_weights(engine, c, dir);  // adapters start from zero: not required from the files
  const at::Tensor ids = ids_tensor(16, 6);
  torch::NoGradGuard no_grad;
  const at::Tensor got = engine.forward([&] { return model->forward(ids); });
  EXPECT_LE(zs::test::max_abs_diff(got, plain(c, state)->forward(ids)), 1e-5);  // B = 0: the base model
}

// ---- bad checkpoints: one error, the exact text ----

TEST(HfCheckpoint, EveryProblemIsListedWithItsFileInOneError) {
  const std::string dir = shared_dir("bad-tensors");
  const TinySpec spec;
  const zm::LlamaConfig c = spec.config();
  State state = zs_llama_test::random_state(c, 15);
  state.erase(std::remove_if(state.begin(), state.end(),
                             [](const auto& kv) {
                               return kv.first == "model.layers.1.mlp.up_proj.weight" ||
                                      kv.first == "model.norm.weight";
                             }),
              state.end());
  for (auto& [k, v] : state) {
    if (k == "model.layers.0.self_attn.k_proj.weight") v = at::zeros({64, 64});  // as if num_key_value_heads were 4
  }
  state.emplace_back("model.layers.0.extra.weight", at::zeros({3}));
  write_model(dir, spec, state, 2);
  const std::string text = message_of<zs::CheckpointError>([&] { Sharded m(c, dir); });
  EXPECT_EQ(text, "Hugging Face checkpoint '" + dir +
                      "' does not fit its config 'config.json': 2 missing "
                      "(model.layers.1.mlp.up_proj.weight [96, 64]; model.norm.weight [64]); 1 unexpected "
                      "(model.layers.0.extra.weight [3] in model-00002-of-00002.safetensors); 1 of another shape "
                      "(model.layers.0.self_attn.k_proj.weight in model-00001-of-00002.safetensors: file [64, 64], "
                      "config.json [32, 64])");
}

TEST(HfCheckpoint, BadDirectoriesAreIoErrorsWithTheExactText) {
  const std::string dir = shared_dir("bad-dirs");
  const TinySpec spec;
  const zm::LlamaConfig c = spec.config();
  const State state = zs_llama_test::random_state(c, 16);
  auto open_error = [&](const std::string& d) {
    return message_of<zs::IoError>([&] { zs::TensorDirectory::open(d); });
  };
  if (zs::test::rank() == 0) {
    // A missing shard file.
    zs_llama_test::write_hf_dir(dir + "/missing", spec.config_json(), state, 2);
    fs::remove(dir + "/missing/model-00002-of-00002.safetensors");
    // An index naming a tensor no file holds.
    zs_llama_test::write_hf_dir(dir + "/ghost", spec.config_json(), state, 2);
    {
      std::ifstream in(dir + "/ghost/model.safetensors.index.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      text.replace(text.find("\"weight_map\":{"), 14,
                   "\"weight_map\":{\"model.ghost.weight\":\"model-00001-of-00002.safetensors\",");
      std::ofstream(dir + "/ghost/model.safetensors.index.json") << text;
    }
    // A truncated shard.
    zs_llama_test::write_hf_dir(dir + "/truncated", spec.config_json(), state, 2);
    const std::string shard = dir + "/truncated/model-00002-of-00002.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    fs::create_directories(dir + "/empty");
  }
  zs::test::barrier();
  EXPECT_EQ(open_error(dir + "/missing"), "model index '" + dir +
                                              "/missing/model.safetensors.index.json' names shard file "
                                              "'model-00002-of-00002.safetensors', which does not exist in '" +
                                              dir +
                                              "/missing' (15 tensors are "
                                              "mapped to it, e.g. 'model.layers.1.post_attention_layernorm.weight')");
  EXPECT_EQ(open_error(dir + "/ghost"),
            "model index '" + dir +
                "/ghost/model.safetensors.index.json' maps tensor "
                "'model.ghost.weight' to 'model-00001-of-00002.safetensors', which does not hold it (no shard does)");
  EXPECT_EQ(open_error(dir + "/truncated"),
            "safetensors file '" + dir +
                "/truncated/model-00002-of-00002.safetensors' is truncated: tensor "
                "'lm_head.weight' ends at data byte 279552 but the file holds 279452 data bytes");
  EXPECT_EQ(open_error(dir + "/empty"),
            "'" + dir +
                "/empty' holds no model weights: expected model.safetensors, "
                "model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json");
  // Through the loader, the same text, on every rank.
  EXPECT_EQ(message_of<zs::IoError>([&] { Sharded m(c, dir + "/truncated"); }),
            "safetensors file '" + dir +
                "/truncated/model-00002-of-00002.safetensors' is truncated: tensor "
                "'lm_head.weight' ends at data byte 279552 but the file holds 279452 data bytes");
}

TEST(HfCheckpoint, UnsupportedConfigsInADirectoryNameTheFile) {
  const std::string dir = shared_dir("bad-config");
  if (zs::test::rank() == 0) {
    TinySpec gemma;
    gemma.model_type = "gemma";
    std::ofstream(dir + "/config.json") << gemma.config_json();
  }
  zs::test::barrier();
  EXPECT_EQ(message_of<zs::ConfigError>([&] { zm::LlamaConfig::read(dir); }),
            "'" + dir +
                "/config.json': model_type \"gemma\" is not supported (zeroshard implements \"llama\", "
                "\"mistral\" and \"qwen2\")");
  if (zs::test::rank() == 0) {
    TinySpec yarn;
    yarn.rope_scaling = R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})";
    std::ofstream(dir + "/config.json") << yarn.config_json();
  }
  zs::test::barrier();
  EXPECT_EQ(message_of<zs::ConfigError>([&] { zm::LlamaConfig::read(dir); }),
            "'" + dir +
                "/config.json': key 'rope_scaling.rope_type' = \"yarn\" is not implemented (zeroshard "
                "implements \"default\", \"linear\" and \"llama3\")");
  EXPECT_EQ(message_of<zs::ConfigError>([&] { zm::LlamaConfig::read(dir + "/nowhere"); }),
            "model config '" + dir + "/nowhere' cannot be read (no such file)");
}

}  // namespace
