// SPDX-License-Identifier: Apache-2.0
// Fine-tuned Llama-family models out the way others load them, and PEFT adapters back in, checked
// against clients nobody here wrote: llama.cpp (node-llama-cpp, tests/models/llama_cpp_nll.mjs) on
// the GGUF exported from a checkpoint, a plain-PyTorch forward (tests/python/llama_ref.py) on the
// exported Hugging Face directory, and PEFT's application of the adapter written in plain PyTorch
// (tests/python/peft_ref.py) on the base.
//
// LlamaExportTrain (2 ranks, the CTest fixture llama_export) writes a tiny base model in Hugging
// Face's layout (two safetensors shards and their index; GQA; q/k/head weights std 0.25), fine-tunes
// it with LoRA through the engine (ShardedInit, the LoRA unit hook, AdamW), saves a checkpoint
// recording config.json and the LoRA options, and exports it: a Hugging Face directory (merged,
// fp32, written by both ranks, several files), a PEFT adapter, GGUF (F32); also a tied model's
// checkpoint exported in bf16, and a checkpoint that records no config. LlamaExportReferences (one
// process, fixture llama_export_refs) runs llama.cpp and PyTorch on them. LlamaExport.* (1 and 2
// ranks) then compare:
//   the checkpoint, loaded in zeroshard      vs llama.cpp on the GGUF: mean NLL 1e-5 relative, each token 1e-3;
//                                            and its NLL differs from the base model's (by llama.cpp)
//   the exported directory, in zeroshard     vs PyTorch on it: 1e-4 relative, each token 1e-3
//   base + PEFT adapter, in zeroshard        vs PyTorch applying the adapter as PEFT does: 1e-4, 1e-3
// the files' fields against the formats, and every bad input's exact error text.

#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "common/test_util.h"
#include "models/llama_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/models/gguf_export.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/hf_export.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/models/llama_checkpoint.h"
#include "zeroshard/models/peft_adapter.h"

namespace zs = zeroshard;
using zs::test::message_of;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;
using zs_llama_test::TinySpec;

namespace {

const std::string kWork = ZS_LLAMA_EXPORT_DIR;
constexpr int64_t kIds = 64;

TinySpec base_spec() {
  TinySpec s;  // GQA 4/2, untied, rope_theta 500000
  s.extra = "\"_name_or_path\": \"tiny-llama\"";
  return s;
}

TinySpec tied_spec() {
  TinySpec s;
  s.tied = true;
  return s;
}

zs::lora::Options lora_options() { return {4, 8.0, 0.0, {"*.q_proj", "*.v_proj", "*.down_proj"}}; }

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using Json = nlohmann::ordered_json;  // members in file order

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) {
    ADD_FAILURE() << "'" << path << "' is missing: the fixtures LlamaExportTrain and LlamaExportReferences did not "
                  << "write it (run ctest -R llama_export, which runs them first)";
    return {};
  }
  return Json::parse(text_of(path));
}

std::vector<int64_t> read_ids() {
  std::vector<int64_t> ids;
  for (const Json& v : read_json(kWork + "/ids.json")) ids.push_back(v.get<int64_t>());
  return ids;
}

std::vector<double> token_nll(const std::string& path) {
  std::vector<double> out;
  const Json j = read_json(path);
  if (!j.is_object() || !j.contains("token_nll")) return out;
  for (const Json& x : j.at("token_nll")) out.push_back(x.is_number() ? x.get<double>() : NAN);
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

// Relative difference of the means and the largest per-token difference (+infinity for NaN or a
// length mismatch).
struct Distance {
  double mean_rel = INFINITY, worst_token = INFINITY;
};
Distance distance(const std::vector<double>& got, const std::vector<double>& want) {
  Distance d;
  if (got.size() != want.size() || got.empty()) return d;
  d.worst_token = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    d.worst_token = std::max(d.worst_token, zs::test::nan_as_inf(std::fabs(got[i] - want[i])));
  }
  d.mean_rel = zs::test::nan_as_inf(std::fabs(mean(got) - mean(want)) / std::fabs(mean(want)));
  return d;
}

// A model of `c` (with adapters when `lora` is set) built sharded over the test's ranks, loaded by
// `load`; its per-token NLL of the fixture's ids.
std::vector<double> zeroshard_nll(const zm::LlamaConfig& c, const std::optional<zs::lora::Options>& lora,
                                  const std::function<void(zs::ShardingEngine&)>& load) {
  zs::ShardingOptions so;
  if (lora) so.unit_hooks.push_back(zs::lora::unit_hook(*lora));
  zs::ShardedInit init(zs::test::session(), so);
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  load(engine);
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = at::tensor(read_ids(), at::kLong).view({1, -1});
  const at::Tensor nll = engine.forward([&] { return zm::causal_lm_token_nll(model->forward(x), x); });
  return std::vector<double>(nll.data_ptr<float>(), nll.data_ptr<float>() + nll.numel());
}

std::vector<double> checkpoint_nll(const std::string& ckpt) {
  const zm::LlamaCheckpoint ck = zm::LlamaCheckpoint::open(ckpt);
  return zeroshard_nll(ck.config, ck.lora, [&](zs::ShardingEngine& e) { zm::load_checkpoint_weights(e, ck); });
}

std::vector<double> hf_nll(const std::string& dir) {
  const zm::LlamaConfig c = zm::LlamaConfig::read(dir);
  return zeroshard_nll(c, std::nullopt, [&](zs::ShardingEngine& e) { zm::load_hf_weights(e, c, dir); });
}

void run(const std::string& command) {
  const int rc = std::system((command + " 2>" + kWork + "/last-command.stderr").c_str());
  ASSERT_EQ(rc, 0) << command << "\n" << text_of(kWork + "/last-command.stderr");
}

// A few optimizer steps of LoRA on the fixture's ids (each rank its half), then a checkpoint that
// records the model's config.json and LoRA options.
void fine_tune_and_save(const TinySpec& spec, const std::string& base, const std::string& ckpt_dir) {
  const zm::LlamaConfig c = spec.config();
  zs::ShardingOptions so;
  so.unit_hooks.push_back(zs::lora::unit_hook(lora_options()));
  zs::ShardedInit init(zs::test::session(), so);
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  zm::load_hf_weights(engine, c, base);
  zs::AdamOptions ao;
  ao.lr = 1e-2;
  ao.weight_decay = 0.01;
  auto opt = zs::make_adamw(ao);
  const std::vector<int64_t> ids = read_ids();
  const int64_t half = kIds / zs::test::world_size();
  const at::Tensor x = at::tensor(std::vector<int64_t>(ids.begin() + zs::test::rank() * half,
                                                       ids.begin() + (zs::test::rank() + 1) * half), at::kLong)
                           .view({1, -1});
  for (int step = 0; step < 4; ++step) {
    at::Tensor loss = engine.forward([&] { return zm::causal_lm_loss(model->forward(x), x); });
    loss.backward();
    engine.step(*opt);
    engine.zero_grad();
  }
  zs::CheckpointOptions co;
  co.dir = ckpt_dir;
  co.model.hf_config = spec.config_json();
  co.model.lora = lora_options();
  zs::Checkpointer(engine, co).save(*opt, {4});
  zs::CheckpointOptions plain;  // the same, recording nothing about the model
  plain.dir = ckpt_dir + "-plain";
  zs::Checkpointer(engine, plain).save(*opt, {4});
}

// A checkpoint of the tied model as loaded (no adapters, no training).
void save_tied(const std::string& base, const std::string& ckpt_dir) {
  const zm::LlamaConfig c = tied_spec().config();
  zs::ShardedInit init(zs::test::session(), {});
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  zm::load_hf_weights(engine, c, base);
  auto opt = zs::make_adamw({});
  zs::CheckpointOptions co;
  co.dir = ckpt_dir;
  co.model.hf_config = tied_spec().config_json();
  zs::Checkpointer(engine, co).save(*opt, {0});
}

std::string job(const std::string& key, const std::string& source, const std::string& out,
                const std::string& extra = "") {
  return "{\"" + key + "\": " + Json(source).dump() + ", \"ids\": " + Json(kWork + "/ids.json").dump() +
         ", \"out\": " + Json(out).dump() + extra + "}";
}

void write_jobs(const std::string& path, const std::vector<std::string>& jobs) {
  std::ofstream f(path);
  f << "[";
  for (size_t i = 0; i < jobs.size(); ++i) f << (i ? ",\n" : "\n") << jobs[i];
  f << "\n]\n";
}

}  // namespace

// ---- the fixtures ----

TEST(LlamaExportTrain, FineTuneSaveAndExport) {
  ASSERT_EQ(zs::test::world_size(), 2) << "the fixture fine-tunes at 2 ranks";
  if (zs::test::rank() == 0) {
    fs::remove_all(kWork);
    fs::create_directories(kWork);
    std::ofstream ids(kWork + "/ids.json");
    const std::vector<int64_t> v = zs_llama_test::random_ids(kIds, 11);
    ids << "[";
    for (size_t i = 0; i < v.size(); ++i) ids << (i ? ", " : "") << v[i];
    ids << "]\n";
    ids.close();
    zs_llama_test::write_hf_dir(kWork + "/base", base_spec().config_json(),
                                zs_llama_test::random_state(base_spec().config(), 21), 2);
    zs_llama_test::write_hf_dir(kWork + "/base-tied", tied_spec().config_json(),
                                zs_llama_test::random_state(tied_spec().config(), 22), 2);
  }
  zs::test::barrier();
  fine_tune_and_save(base_spec(), kWork + "/base", kWork + "/ckpt");
  save_tied(kWork + "/base-tied", kWork + "/ckpt-tied");
  // Exports: the directories by both ranks, the single files by rank 0.
  zm::export_hf_directory(kWork + "/ckpt", kWork + "/hf", {c10::kFloat, 100000, true}, zs::test::world().get());
  zm::export_hf_directory(kWork + "/ckpt-tied", kWork + "/hf-tied", {c10::kBFloat16, 100000, false},
                          zs::test::world().get());
  if (zs::test::rank() == 0) {
    zm::export_peft_adapter(kWork + "/ckpt", kWork + "/peft");
    zm::export_gguf_from_checkpoint(kWork + "/ckpt", kWork + "/ft.f32.gguf");
    zm::export_gguf(kWork + "/base", kWork + "/base.f32.gguf");
  }
  zs::test::barrier();
}

TEST(LlamaExportReferences, LlamaCppAndPyTorch) {
  ASSERT_EQ(zs::test::world_size(), 1) << "the fixture runs as one process";
  const std::string modules = ZS_CLIENTS_MODULES;
  ASSERT_TRUE(fs::exists(modules + "/node-llama-cpp/package.json"))
      << "node-llama-cpp is missing from '" << modules << "': run scripts/install-clients.sh " << ZS_BUILD_DIR;
  write_jobs(kWork + "/node-jobs.json", {job("gguf", kWork + "/ft.f32.gguf", kWork + "/ft.llama_cpp.json"),
                                         job("gguf", kWork + "/base.f32.gguf", kWork + "/base.llama_cpp.json")});
  write_jobs(kWork + "/torch-jobs.json", {job("hf_dir", kWork + "/hf", kWork + "/hf.torch.json"),
                                          job("hf_dir", kWork + "/hf-tied", kWork + "/hf-tied.torch.json")});
  write_jobs(kWork + "/peft-jobs.json", {job("hf_dir", kWork + "/base", kWork + "/peft.torch.json",
                                             ", \"adapter\": " + Json(kWork + "/peft").dump())});
  const std::string tests = std::string(ZS_SOURCE_DIR) + "/tests";
  run("node " + tests + "/models/llama_cpp_nll.mjs --modules " + modules + " --jobs " + kWork + "/node-jobs.json");
  run(std::string(ZS_TORCH_PYTHON) + " " + tests + "/python/llama_ref.py nll --jobs " + kWork + "/torch-jobs.json");
  run(std::string(ZS_TORCH_PYTHON) + " " + tests + "/python/peft_ref.py nll --jobs " + kWork + "/peft-jobs.json");
}

// ---- the comparisons ----

TEST(LlamaExport, CheckpointMatchesLlamaCppOnItsGgufAndDiffersFromTheBase) {
  const std::vector<double> ours = checkpoint_nll(kWork + "/ckpt");
  const std::vector<double> ft = token_nll(kWork + "/ft.llama_cpp.json");
  const std::vector<double> base = token_nll(kWork + "/base.llama_cpp.json");
  const Distance d = distance(ours, ft);
  EXPECT_LE(d.mean_rel, 1e-5) << "mean NLL: zeroshard " << mean(ours) << ", llama.cpp " << mean(ft);
  EXPECT_LE(d.worst_token, 1e-3);
  const double change = std::fabs(mean(ft) - mean(base)) / mean(base);
  EXPECT_GT(change, 1e-3) << "the fine-tune changed nothing: llama.cpp gives " << mean(ft) << " and " << mean(base);
  EXPECT_LT(mean(ft), mean(base)) << "training on these ids lowers their NLL";
  if (zs::test::rank() == 0) {
    std::printf("checkpoint: zeroshard %.8f, llama.cpp F32 GGUF %.8f (rel %.1e, worst token %.1e); base by llama.cpp "
                "%.8f (%.1f%% higher)\n", mean(ours), mean(ft), d.mean_rel, d.worst_token, mean(base), 100 * change);
  }
}

TEST(LlamaExport, HfDirectoryMatchesPyTorchAndTheCheckpoint) {
  for (const char* name : {"hf", "hf-tied"}) {
    SCOPED_TRACE(name);
    const std::vector<double> ours = hf_nll(kWork + "/" + name);
    const std::vector<double> torch = token_nll(kWork + "/" + name + ".torch.json");
    const Distance d = distance(ours, torch);
    EXPECT_LE(d.mean_rel, 1e-4) << "mean NLL: zeroshard " << mean(ours) << ", PyTorch " << mean(torch);
    EXPECT_LE(d.worst_token, 1e-3);
    if (zs::test::rank() == 0) {
      std::printf("%-8s zeroshard %.8f, PyTorch %.8f (rel %.1e, worst token %.1e)\n", name, mean(ours), mean(torch),
                  d.mean_rel, d.worst_token);
    }
  }
  const Distance merged = distance(hf_nll(kWork + "/hf"), checkpoint_nll(kWork + "/ckpt"));
  EXPECT_LE(merged.mean_rel, 1e-5) << "the merged directory against the checkpoint with its adapters";
}

TEST(LlamaExport, PeftAdapterOnTheBaseMatchesPyTorch) {
  const std::string base = kWork + "/base";
  const zm::LlamaConfig c = zm::LlamaConfig::read(base);
  const zm::PeftAdapter a = zm::read_peft_adapter(kWork + "/peft", c, base);
  EXPECT_EQ(a.lora.rank, 4);
  EXPECT_EQ(a.lora.alpha, 8.0);
  EXPECT_EQ(a.base_model_name_or_path, "tiny-llama");
  EXPECT_EQ(a.layers.size(), 9u);
  const std::vector<double> ours = zeroshard_nll(c, a.lora, [&](zs::ShardingEngine& e) {
    zm::load_hf_weights(e, c, base);
    zm::load_peft_adapter(e, a);
  });
  const std::vector<double> torch = token_nll(kWork + "/peft.torch.json");
  const Distance d = distance(ours, torch);
  EXPECT_LE(d.mean_rel, 1e-4) << "mean NLL: zeroshard " << mean(ours) << ", PyTorch with the adapter " << mean(torch);
  EXPECT_LE(d.worst_token, 1e-3);
  const Distance ck = distance(ours, token_nll(kWork + "/ft.llama_cpp.json"));
  EXPECT_LE(ck.mean_rel, 1e-5) << "the adapter reloaded against llama.cpp on the checkpoint's GGUF";
  if (zs::test::rank() == 0) {
    std::printf("base + PEFT adapter: zeroshard %.8f, PyTorch %.8f (rel %.1e, worst token %.1e)\n", mean(ours),
                mean(torch), d.mean_rel, d.worst_token);
  }
}

// ---- the files, field by field ----

namespace {

// name -> (dtype, shape) of a safetensors file's header, read by hand.
std::map<std::string, std::pair<std::string, std::vector<int64_t>>> safetensors_header(const std::string& path,
                                                                                      int64_t* data_bytes) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> out;
  *data_bytes = 0;
  const Json j = Json::parse(header);
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") continue;
    out[name] = {v.at("dtype").get<std::string>(), v.at("shape").get<std::vector<int64_t>>()};
    *data_bytes += v.at("data_offsets")[1].get<int64_t>() - v.at("data_offsets")[0].get<int64_t>();
  }
  return out;
}

void check_directory(const std::string& dir, const TinySpec& spec, const std::string& dtype, const char* st_dtype) {
  const Json index = read_json(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(index.is_object());
  std::set<std::string> files;
  for (const auto& [tensor, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
  const std::regex shard_name("model-(\\d{5})-of-(\\d{5})\\.safetensors");
  int64_t total = 0;
  std::map<std::string, std::string> holder;  // tensor -> the file whose header holds it
  for (const std::string& f : files) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(f, m, shard_name)) << f;
    EXPECT_EQ(std::stoul(m[2].str()), files.size()) << f;
    int64_t bytes = 0;
    for (const auto& [name, info] : safetensors_header(dir + "/" + f, &bytes)) {
      EXPECT_EQ(info.first, st_dtype) << name;
      EXPECT_TRUE(holder.emplace(name, f).second) << name << " in two files";
    }
    total += bytes;
  }
  int64_t n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) n += e.path().extension() == ".safetensors";
  EXPECT_EQ(static_cast<size_t>(n), files.size()) << "every file is in the index";
  EXPECT_GE(files.size(), 3u) << "100KB files: the model does not fit in one";
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : index.at("weight_map").items()) weight_map[tensor] = file.get<std::string>();
  EXPECT_EQ(weight_map, holder);
  std::set<std::string> want;
  for (const zs::TensorInfo& t : zm::hf_tensors(spec.config())) want.insert(t.name);
  std::set<std::string> got;
  for (const auto& [k, v] : weight_map) got.insert(k);
  EXPECT_EQ(got, want);
  EXPECT_EQ(weight_map.count("lm_head.weight"), spec.tied ? 0u : 1u);
  // config.json: every key the model was built from, in its order, torch_dtype the dtype written.
  const Json config = read_json(dir + "/config.json");
  const Json built = Json::parse(spec.config_json());
  ASSERT_EQ(config.size(), built.size());
  auto member = config.items().begin();
  for (const auto& [key, value] : built.items()) {
    EXPECT_EQ(member.key(), key);
    if (key != "torch_dtype") EXPECT_EQ(member.value(), value) << key;  // numbers compare by value
    ++member;
  }
  EXPECT_EQ(config.at("torch_dtype").get<std::string>(), dtype);
  EXPECT_EQ(config.at("architectures").at(0).get<std::string>(), "LlamaForCausalLM");
  EXPECT_EQ(config.at("model_type").get<std::string>(), "llama");
  EXPECT_EQ(config.at("num_key_value_heads").get<int64_t>(), 2);
  EXPECT_EQ(config.at("tie_word_embeddings").get<bool>(), spec.tied);
}

}  // namespace

TEST(LlamaExport, FilesFollowTheFormats) {
  check_directory(kWork + "/hf", base_spec(), "float32", "F32");
  check_directory(kWork + "/hf-tied", tied_spec(), "bfloat16", "BF16");
  const Json ac = read_json(kWork + "/peft/adapter_config.json");
  ASSERT_TRUE(ac.is_object());
  EXPECT_EQ(ac.at("peft_type").get<std::string>(), "LORA");
  EXPECT_EQ(ac.at("task_type").get<std::string>(), "CAUSAL_LM");
  EXPECT_EQ(ac.at("r").get<double>(), 4);
  EXPECT_EQ(ac.at("lora_alpha").get<double>(), 8);
  EXPECT_EQ(ac.at("lora_dropout").get<double>(), 0);
  EXPECT_EQ(ac.at("bias").get<std::string>(), "none");
  EXPECT_FALSE(ac.at("fan_in_fan_out").get<bool>());
  EXPECT_TRUE(ac.at("inference_mode").get<bool>());
  EXPECT_FALSE(ac.at("use_rslora").get<bool>());
  EXPECT_FALSE(ac.at("use_dora").get<bool>());
  EXPECT_EQ(ac.at("base_model_name_or_path").get<std::string>(), "tiny-llama");
  const std::vector<std::string> targets = ac.at("target_modules").get<std::vector<std::string>>();
  EXPECT_EQ(targets, (std::vector<std::string>{"down_proj", "q_proj", "v_proj"}));
  int64_t bytes = 0;
  const auto header = safetensors_header(kWork + "/peft/adapter_model.safetensors", &bytes);
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> want;
  auto pair = [&](const std::string& m, int64_t in, int64_t out) {
    want["base_model.model." + m + ".lora_A.weight"] = {"F32", {4, in}};
    want["base_model.model." + m + ".lora_B.weight"] = {"F32", {out, 4}};
  };
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    pair(p + "self_attn.q_proj", 64, 64);
    pair(p + "self_attn.v_proj", 64, 32);
    pair(p + "mlp.down_proj", 96, 64);
  }
  EXPECT_EQ(header, want);
  EXPECT_EQ(std::set<std::string>({"adapter_config.json", "adapter_model.safetensors"}), [] {
    std::set<std::string> s;
    for (const fs::directory_entry& e : fs::directory_iterator(kWork + "/peft")) s.insert(e.path().filename().string());
    return s;
  }());
}

// ---- bad input: one error each, the exact text ----

namespace {

// A copy of the exported adapter in this rank's folder, its adapter_config.json edited.
std::string adapter_copy(const std::string& dir, const std::string& from, const std::string& to, bool weights = true) {
  fs::create_directories(dir);
  std::string config = text_of(kWork + "/peft/adapter_config.json");
  if (!from.empty()) {
    const size_t at = config.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) config.replace(at, from.size(), to);
  }
  std::ofstream(dir + "/adapter_config.json") << config;
  if (weights) fs::copy_file(kWork + "/peft/adapter_model.safetensors", dir + "/adapter_model.safetensors");
  return dir;
}

}  // namespace

TEST(LlamaExport, BadAdaptersAndCheckpointsHaveExactErrors) {
  const zs::test::RankDir tmp("llama-export-bad");
  const std::string base = kWork + "/base";
  const zm::LlamaConfig c = zm::LlamaConfig::read(base);
  const auto read = [&](const std::string& dir) { zm::read_peft_adapter(dir, c, base); };
  // An adapter whose base has another intermediate size.
  TinySpec other = base_spec();
  other.intermediate = 80;
  const std::string other_dir = tmp.path + "/base-80";
  zs_llama_test::write_hf_dir(other_dir, other.config_json(), zs_llama_test::random_state(other.config(), 3), 2);
  const zm::LlamaConfig oc = other.config();
  std::string shapes;
  for (int l = 0; l < 3; ++l) {
    // write_hf_dir puts the first 15 of the 30 tensors (the embedding, layer 0, part of layer 1)
    // into the first file.
    const std::string file = l == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    shapes += std::string(l ? "; " : "") + "base_model.model.model.layers." + std::to_string(l) +
              ".mlp.down_proj.lora_A.weight is [4, 96] Float, but the base's model.layers." + std::to_string(l) +
              ".mlp.down_proj.weight in '" + other_dir + "/" + file + "' is [64, 80], so lora_A must be a floating "
              "[4, 80] (r = 4)";
  }
  EXPECT_EQ(message_of<zs::CheckpointError>([&] { zm::read_peft_adapter(kWork + "/peft", oc, other_dir); }),
            "PEFT adapter '" + kWork + "/peft/adapter_model.safetensors' does not fit the base model '" + other_dir +
                "': 3 of another shape (" + shapes + ")");
  const std::string ia3 = adapter_copy(tmp.path + "/ia3", "\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"");
  EXPECT_EQ(message_of<zs::ConfigError>([&] { read(ia3); }),
            "'" + ia3 + "/adapter_config.json': peft_type \"IA3\" is not supported (zeroshard loads LoRA adapters: "
            "\"LORA\")");
  const std::string no_weights = adapter_copy(tmp.path + "/no-weights", "", "", false);
  EXPECT_EQ(message_of<zs::IoError>([&] { read(no_weights); }),
            "PEFT adapter '" + no_weights + "' has no adapter_model.safetensors (a PEFT adapter directory holds "
            "adapter_config.json and adapter_model.safetensors)");
  const std::string qkv = adapter_copy(tmp.path + "/qkv", "\"q_proj\"", "\"qkv\"");
  EXPECT_EQ(message_of<zs::ConfigError>([&] { read(qkv); }),
            "'" + qkv + "/adapter_config.json': key 'target_modules' entry 'qkv' names no linear module of the base "
            "model '" + base + "/config.json' (its linear modules end in down_proj, gate_proj, k_proj, lm_head, o_proj, "
            "q_proj, up_proj, v_proj)");
  const std::string layer1 = adapter_copy(tmp.path + "/layer1", "\"q_proj\"", "\"layers.1.self_attn.q_proj\"");
  EXPECT_EQ(message_of<zs::ConfigError>([&] { read(layer1); }),
            "'" + layer1 + "/adapter_config.json': key 'target_modules' adapts 'self_attn.q_proj' in 1 of the 3 decoder "
            "layers: zeroshard adapts every decoder layer alike");
  // Checkpoints: no config.json recorded; adapters without --merge-lora; an existing directory.
  const std::string plain = kWork + "/ckpt-plain/step-00000004";
  EXPECT_EQ(message_of<zs::CheckpointError>([&] {
              zm::export_hf_directory(kWork + "/ckpt-plain", tmp.path + "/out", {}, zs::test::world().get());
            }),
            "checkpoint '" + plain + "' does not record the Hugging Face config.json its model was built from (it was "
            "saved without CheckpointOptions::model.hf_config), so it cannot be read as a Llama-family model");
  EXPECT_EQ(message_of<zs::CheckpointError>([&] {
              zm::export_hf_directory(kWork + "/ckpt", tmp.path + "/out", {}, zs::test::world().get());
            }),
            "checkpoint '" + kWork + "/ckpt/step-00000004' has LoRA adapters on 9 layers: merge them into the weights "
            "(--merge-lora), or export them as a PEFT adapter (--format peft)");
  EXPECT_EQ(message_of<zs::CheckpointError>([&] { zm::export_peft_adapter(kWork + "/ckpt-tied", tmp.path + "/p"); }),
            "checkpoint '" + kWork + "/ckpt-tied/step-00000000' has no LoRA adapters (no lora_A / lora_B parameters): "
            "there is no PEFT adapter to write (--format hf exports its weights)");
  EXPECT_EQ(message_of<zs::UsageError>([&] { zm::export_peft_adapter(kWork + "/ckpt", kWork + "/peft"); }),
            "'" + kWork + "/peft' already exists: an export writes a new directory (remove it, or name another)");
  EXPECT_FALSE(fs::exists(tmp.path + "/out")) << "nothing is left of a failed export";
}

TEST(LlamaExport, ADamagedRankFileFailsTheExportNamingTheSection) {
  const zs::test::RankDir tmp("llama-export-damaged");
  fs::copy(kWork + "/ckpt", tmp.path + "/ckpt", fs::copy_options::recursive);
  const std::string file = tmp.path + "/ckpt/step-00000004/rank-1.zsr";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);  // inside the first section after the 16-byte magic
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  const std::string error =
      message_of<zs::CheckpointError>([&] { zm::export_gguf_from_checkpoint(tmp.path + "/ckpt", tmp.path + "/x.gguf"); });
  EXPECT_EQ(error.substr(0, error.find(" at offset")), "checksum mismatch in '" + file + "', section 'f0/param'");
  EXPECT_NE(error.find("; the file is damaged"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(tmp.path + "/x.gguf"));
}

TEST(LlamaExport, APeftAdapterLoadedOntoTheBaseTrainsOn) {
  const std::string base = kWork + "/base";
  const zm::LlamaConfig c = zm::LlamaConfig::read(base);
  const zm::PeftAdapter a = zm::read_peft_adapter(kWork + "/peft", c, base);
  zs::ShardingOptions so;
  so.unit_hooks.push_back(zs::lora::unit_hook(a.lora));
  zs::ShardedInit init(zs::test::session(), so);
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  zm::load_hf_weights(engine, c, base);
  zm::load_peft_adapter(engine, a);
  EXPECT_EQ(engine.num_trainable_params(), 3 * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4 + 4 * 96 + 64 * 4));
  auto opt = zs::make_adamw({1e-2});
  const at::Tensor x = at::tensor(read_ids(), at::kLong).view({1, -1});
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    at::Tensor loss = engine.forward([&] { return zm::causal_lm_loss(model->forward(x), x); });
    losses.push_back(loss.item<double>());
    loss.backward();
    engine.step(*opt);
    engine.zero_grad();
  }
  EXPECT_NEAR(losses[0], mean(token_nll(kWork + "/peft.torch.json")), 1e-4) << "it starts where the adapter ended";
  EXPECT_LT(losses[2], losses[0]) << "and trains on";
}
