// SPDX-License-Identifier: Apache-2.0
// zeroshard's Llama family against implementations nobody here wrote: llama.cpp (node-llama-cpp,
// pinned in tests/clients) running the GGUF files zeroshard exports, and a plain-PyTorch forward
// with Hugging Face's semantics (tests/python/llama_ref.py, Debian's PyTorch 1.13).
//
// LlamaClientsPrepare.Everything (one process, the CTest fixture llama_clients) writes tiny
// models in Hugging Face's layout (two safetensors shards and their index; q/k/head weights with
// std 0.25 so that errors do not cancel), exports them to GGUF (F32, Q8_0), writes two negative
// controls (a GGUF without the q/k permutation, one with the wrong rope_theta), and runs llama.cpp
// and PyTorch on fixed ids. LlamaClients.* then load each model sharded (at 1 and 2 ranks) and
// compare zeroshard's per-token next-token NLL and greedy continuation with theirs:
//   llama.cpp F32:  mean NLL within 1e-5 relative, every token within 1e-3, 32 greedy ids identical
//   llama.cpp Q8_0: mean NLL within 2% relative
//   PyTorch:        mean NLL within 1e-4 relative, every token within 1e-3, greedy ids identical
// and the negative controls must fail the llama.cpp F32 comparison.

#include <ATen/ops/argmax.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_util.h"
#include "models/llama_test_util.h"
#include "zeroshard/models/gguf_export.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;
using zs_llama_test::TinySpec;

namespace {

const std::string kWork = ZS_LLAMA_CLIENTS_DIR;
constexpr int64_t kIds = 64, kPrompt = 8, kGenerate = 32;

struct Variant {
  std::string name;
  TinySpec spec;
  bool q8_0 = false;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"llama-gqa", TinySpec{}, true});  // GQA 4/2, untied, rope_theta 500000
  TinySpec tied;
  tied.tied = tied.attention_bias = tied.mlp_bias = true;
  tied.rope_scaling = R"({"rope_type": "linear", "factor": 2.0})";
  v.push_back({"llama-tied-bias-linear", tied, false});
  TinySpec llama3;
  llama3.rope_scaling =
      R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 128})";
  v.push_back({"llama3-scaled", llama3, false});
  TinySpec qwen;
  qwen.model_type = "qwen2";
  qwen.rope_theta = 1000000;
  v.push_back({"qwen2", qwen, true});
  TinySpec mistral;
  mistral.model_type = "mistral";
  mistral.extra = "\"sliding_window\": 4096";  // wider than the run: full attention is exact
  mistral.kv_heads = 1;                          // multi-query attention
  v.push_back({"mistral", mistral, false});
  return v;
}

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) {
    ADD_FAILURE() << "'" << path << "' is missing: the fixture LlamaClientsPrepare did not write it (run "
                  << "ctest -R llama_clients, which runs it first)";
    return {};
  }
  std::stringstream s;
  s << in.rdbuf();
  return Json::parse(s.str());
}

std::vector<double> numbers(const Json& v) {
  std::vector<double> out;
  if (!v.is_array()) return out;
  for (const Json& x : v) out.push_back(x.is_number() ? x.get<double>() : NAN);  // null: a probability of 0
  return out;
}

struct Result {
  std::vector<double> token_nll;
  std::vector<int64_t> generated;
  double mean() const {
    double s = 0;
    for (double x : token_nll) s += x;
    return s / static_cast<double>(token_nll.size());
  }
};

Result read_result(const std::string& path) {
  const Json j = read_json(path);
  Result r;
  if (!j.is_object()) return r;
  r.token_nll = numbers(j.value("token_nll", Json()));
  for (double x : numbers(j.value("generated", Json()))) r.generated.push_back(static_cast<int64_t>(x));
  return r;
}

// How far `got` is from `want`: relative difference of the means, largest per-token difference
// (both +infinity for a NaN or a length mismatch).
struct Distance {
  double mean_rel = INFINITY, worst_token = INFINITY;
};
Distance distance(const Result& got, const Result& want) {
  Distance d;
  if (got.token_nll.size() != want.token_nll.size() || got.token_nll.empty()) return d;
  d.worst_token = 0;
  for (size_t i = 0; i < got.token_nll.size(); ++i) {
    d.worst_token = std::max(d.worst_token, zs::test::nan_as_inf(std::fabs(got.token_nll[i] - want.token_nll[i])));
  }
  d.mean_rel = zs::test::nan_as_inf(std::fabs(got.mean() - want.mean()) / std::fabs(want.mean()));
  return d;
}

bool matches_f32(const Result& got, const Result& llama_cpp) {
  const Distance d = distance(got, llama_cpp);
  return d.mean_rel <= 1e-5 && d.worst_token <= 1e-3 && got.generated == llama_cpp.generated;
}

std::vector<int64_t> read_ids() {
  std::vector<int64_t> ids;
  for (double x : numbers(read_json(kWork + "/ids.json"))) ids.push_back(static_cast<int64_t>(x));
  return ids;
}

// zeroshard on `dir`, built sharded over the test's ranks: per-token NLL and the greedy continuation.
Result zeroshard_result(const std::string& dir) {
  const zm::LlamaConfig c = zm::LlamaConfig::read(dir);
  zs::ShardedInit init(zs::test::session(), {});
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  zm::load_hf_weights(engine, c, dir);
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> ids = read_ids();
  Result r;
  const at::Tensor x = at::tensor(ids, at::kLong).view({1, -1});
  const at::Tensor nll = engine.forward([&] { return zm::causal_lm_token_nll(model->forward(x), x); });
  r.token_nll.assign(nll.data_ptr<float>(), nll.data_ptr<float>() + nll.numel());
  std::vector<int64_t> tokens(ids.begin(), ids.begin() + kPrompt);
  for (int64_t i = 0; i < kGenerate; ++i) {
    const at::Tensor t = at::tensor(tokens, at::kLong).view({1, -1});
    const at::Tensor logits = engine.forward([&] { return model->forward(t); });
    tokens.push_back(at::argmax(logits[0][-1]).item<int64_t>());
    r.generated.push_back(tokens.back());
  }
  return r;
}

void run(const std::string& command) {
  const int rc = std::system((command + " 2>" + kWork + "/last-command.stderr").c_str());
  std::ifstream err(kWork + "/last-command.stderr");
  std::stringstream text;
  text << err.rdbuf();
  ASSERT_EQ(rc, 0) << command << "\n" << text.str();
}

std::string job(const std::string& key, const std::string& source, const std::string& out) {
  return "{\"" + key + "\": " + Json(source).dump() + ", \"ids\": " + Json(kWork + "/ids.json").dump() +
         ", \"out\": " + Json(out).dump() + ", \"generate\": 32, \"prompt_len\": 8}";
}

void write_jobs(const std::string& path, const std::vector<std::string>& jobs) {
  std::ofstream f(path);
  f << "[";
  for (size_t i = 0; i < jobs.size(); ++i) f << (i ? ",\n" : "\n") << jobs[i];
  f << "\n]\n";
}

}  // namespace

// The fixture: models, GGUF files, and what llama.cpp and PyTorch make of them.
TEST(LlamaClientsPrepare, Everything) {
  ASSERT_EQ(zs::test::world_size(), 1) << "the fixture runs as one process";
  const std::string modules = ZS_CLIENTS_MODULES;
  ASSERT_TRUE(fs::exists(modules + "/node-llama-cpp/package.json"))
      << "node-llama-cpp is missing from '" << modules << "': run scripts/install-clients.sh " << ZS_BUILD_DIR;
  fs::remove_all(kWork);
  fs::create_directories(kWork);
  {
    std::ofstream ids(kWork + "/ids.json");
    ids << "[";
    const std::vector<int64_t> v = zs_llama_test::random_ids(kIds, 7);
    for (size_t i = 0; i < v.size(); ++i) ids << (i ? ", " : "") << v[i];
    ids << "]\n";
  }
  std::vector<std::string> node_jobs, torch_jobs;
  uint64_t seed = 100;
  for (const Variant& v : variants()) {
    const zm::LlamaConfig c = v.spec.config();
    const std::string dir = kWork + "/" + v.name;
    const zs_llama_test::State state = zs_llama_test::random_state(c, ++seed);
    zs_llama_test::write_hf_dir(dir, v.spec.config_json(), state, 2);
    zm::export_gguf(dir, dir + ".f32.gguf", {zm::GgufDtype::kF32});
    node_jobs.push_back(job("gguf", dir + ".f32.gguf", dir + ".f32.llama_cpp.json"));
    if (v.q8_0) {
      zm::export_gguf(dir, dir + ".q8_0.gguf", {zm::GgufDtype::kQ8_0});
      node_jobs.push_back(job("gguf", dir + ".q8_0.gguf", dir + ".q8_0.llama_cpp.json"));
    }
    torch_jobs.push_back(job("hf_dir", dir, dir + ".torch.json"));
    if (v.name != "llama-gqa") continue;
    // Negative controls from the same weights. (1) q/k rows stored so that the export's
    // permutation gives back Hugging Face's order: a GGUF without the permutation.
    zs_llama_test::State unpermuted = state;
    for (auto& [k, t] : unpermuted) {
      if (k.find("q_proj.weight") != std::string::npos) t = zs_llama_test::unpermute_rows(t, c.num_attention_heads);
      if (k.find("k_proj.weight") != std::string::npos) t = zs_llama_test::unpermute_rows(t, c.num_key_value_heads);
    }
    zs_llama_test::write_hf_dir(kWork + "/control-unpermuted", v.spec.config_json(), unpermuted, 2);
    zm::export_gguf(kWork + "/control-unpermuted", kWork + "/control-unpermuted.gguf", {});
    node_jobs.push_back(job("gguf", kWork + "/control-unpermuted.gguf", kWork + "/control-unpermuted.llama_cpp.json"));
    // (2) The same weights under rope_theta 10000.
    TinySpec theta = v.spec;
    theta.rope_theta = 10000;
    zs_llama_test::write_hf_dir(kWork + "/control-theta", theta.config_json(), state, 2);
    zm::export_gguf(kWork + "/control-theta", kWork + "/control-theta.gguf", {});
    node_jobs.push_back(job("gguf", kWork + "/control-theta.gguf", kWork + "/control-theta.llama_cpp.json"));
  }
  write_jobs(kWork + "/node-jobs.json", node_jobs);
  write_jobs(kWork + "/torch-jobs.json", torch_jobs);
  const std::string script = std::string(ZS_SOURCE_DIR) + "/tests";
  run("node " + script + "/models/llama_cpp_nll.mjs --modules " + modules + " --jobs " + kWork + "/node-jobs.json");
  run(std::string(ZS_TORCH_PYTHON) + " " + script + "/python/llama_ref.py nll --jobs " + kWork + "/torch-jobs.json");
  // The first model again as PyTorch's own torch.save files, two shards and their index.
  run(std::string(ZS_TORCH_PYTHON) + " " + script + "/python/llama_ref.py write-bin --hf-dir " + kWork +
      "/llama-gqa --out " + kWork + "/llama-gqa-bin --shards 2");
}

TEST(LlamaClients, EveryVariantMatchesLlamaCppAndPyTorch) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    const std::string dir = kWork + "/" + v.name;
    const Result ours = zeroshard_result(dir);
    const Result f32 = read_result(dir + ".f32.llama_cpp.json");
    const Result torch = read_result(dir + ".torch.json");
    const Distance d = distance(ours, f32);
    EXPECT_LE(d.mean_rel, 1e-5) << "mean NLL: zeroshard " << ours.mean() << ", llama.cpp " << f32.mean();
    EXPECT_LE(d.worst_token, 1e-3);
    EXPECT_EQ(ours.generated, f32.generated);
    const Distance t = distance(ours, torch);
    EXPECT_LE(t.mean_rel, 1e-4) << "mean NLL: zeroshard " << ours.mean() << ", PyTorch " << torch.mean();
    EXPECT_LE(t.worst_token, 1e-3);
    EXPECT_EQ(ours.generated, torch.generated);
    if (v.q8_0) {
      const Result q8 = read_result(dir + ".q8_0.llama_cpp.json");
      const double rel = distance(ours, q8).mean_rel;
      EXPECT_LE(rel, 0.02) << "mean NLL: zeroshard " << ours.mean() << ", llama.cpp Q8_0 " << q8.mean();
      if (zs::test::rank() == 0) std::printf("%-24s llama.cpp Q8_0 %.8f (rel %.1e)\n", v.name.c_str(), q8.mean(), rel);
    }
    if (zs::test::rank() == 0) {
      std::printf("%-24s zeroshard %.8f  llama.cpp F32 %.8f (rel %.1e, worst token %.1e)  PyTorch %.8f (rel %.1e)\n",
                  v.name.c_str(), ours.mean(), f32.mean(), d.mean_rel, d.worst_token, torch.mean(), t.mean_rel);
    }
  }
}

TEST(LlamaClients, NegativeControlsFailTheComparison) {
  const Result ours = zeroshard_result(kWork + "/llama-gqa");
  ASSERT_TRUE(matches_f32(ours, read_result(kWork + "/llama-gqa.f32.llama_cpp.json")));  // the control's control
  for (const char* control : {"control-unpermuted", "control-theta"}) {
    SCOPED_TRACE(control);
    const Result theirs = read_result(kWork + "/" + control + ".llama_cpp.json");
    ASSERT_EQ(theirs.token_nll.size(), ours.token_nll.size()) << "llama.cpp ran on the control";
    const Distance d = distance(ours, theirs);
    EXPECT_FALSE(matches_f32(ours, theirs)) << "mean rel " << d.mean_rel << ", worst token " << d.worst_token;
    EXPECT_GT(d.worst_token, 1e-2);  // not a near miss
    if (zs::test::rank() == 0) {
      std::printf("%-24s llama.cpp %.8f (rel %.1e, worst token %.2f): fails, as it must\n", control, theirs.mean(),
                  d.mean_rel, d.worst_token);
    }
  }
}

TEST(LlamaClients, TorchSaveShardsLoadLikeSafetensors) {
  const Result st = zeroshard_result(kWork + "/llama-gqa");
  const Result bin = zeroshard_result(kWork + "/llama-gqa-bin");
  EXPECT_EQ(bin.token_nll, st.token_nll);
  EXPECT_EQ(bin.generated, st.generated);
}
