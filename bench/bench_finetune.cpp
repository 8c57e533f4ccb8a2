// SPDX-License-Identifier: Apache-2.0
// bench_finetune: what fine-tuning costs in memory and time, row by row, in one run: full
// fine-tuning in fp32 (with the optimizer state in memory and on NVMe), bf16 compute, + activation
// checkpointing, + LoRA, + LoRA with the optimizer state on NVMe, + LoRA over an NF4 base
// (QLoRA), + both. Two models:
//   --model gpt    the built-in GPT (default: 106M parameters). Every row starts from the same
//                  pretrained weights, which the benchmark creates and exports first (safetensors,
//                  loaded with load_pretrained; NF4 rows quantise each unit as it is loaded).
//   --model llama  the Llama family (LlamaForCausalLM semantics; default: a 1.1B-parameter shape,
//                  hidden 2048, 22 layers, 32 heads, 4 key/value heads, intermediate 5632, vocab
//                  32000, untied head). Built sharded under a ShardedInit with one seed, so no rank
//                  ever holds the whole model and every row starts from the same weights; LoRA on
//                  all seven projections, NF4 on the frozen projections as each layer is built.
//
//   mpirun -n 2 build/bin/bench_finetune [--model gpt|llama] [--dim D] [--layers L] [--seq 64]
//                                        [--batch 2] [--steps 4] [--lora-rank 8] [--dir DIR]
//
// Peak memory per rank: the tracking CPU allocator's peak of live bytes during the training steps
// (model state, gradients, optimizer state, activations; not the engine's own accounting), taken
// after the model is wrapped and loaded; the largest over the ranks. Step time: median after one
// warm-up step, the slowest rank's. Saving: 1 - peak / the fp32 row's peak. The QLoRA-style
// 4-bit base: precision.frozen_linear = NF4 on every frozen Linear weight (the tied output layer /
// token embedding stays fp32). Final line: JSON.

#include <ATen/ops/full.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/adapt/nf4.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string model = "gpt";
  int64_t dim = 768, layers = 15, heads = 12, seq = 64, batch = 2;
  int64_t kv_heads = 4, intermediate = 5632, vocab = 32000;  // --model llama
  std::string compute = "bf16";  // the compute dtype of the rows after the first two
  int steps = 4;
  int64_t lora_rank = 8;
  std::string dir = ZS_BENCH_DEFAULT_DIR;
  bool llama() const { return model == "llama"; }
};

std::optional<Args> parse(const std::vector<std::string>& argv, bool print) {
  Args a;
  zs::cli::App app("bench_finetune",
                   "Memory and step time of fine-tuning a GPT from pretrained weights: fp32, bf16, + checkpointing, "
                   "+ LoRA, + NVMe optimizer state, + NF4 base, in one run. Final line: JSON.");
  app.usage("mpirun -n N bench_finetune [OPTIONS]");
  app.add_choice("--model", &a.model, {"gpt", "llama"}, "the model family (default gpt)");
  app.add_int("--dim", &a.dim, "model width (default 768; llama: 2048)", 1);
  app.add_int("--layers", &a.layers, "blocks (default 15: 106M parameters at --dim 768; llama: 22)", 1);
  app.add_int("--heads", &a.heads, "attention heads (default 12; llama: 32)", 1);
  app.add_int("--kv-heads", &a.kv_heads, "llama: key/value heads (default 4)", 1);
  app.add_int("--intermediate", &a.intermediate, "llama: MLP width (default 5632)", 1);
  app.add_int("--vocab", &a.vocab, "llama: vocabulary size (default 32000)", 1);
  app.add_choice("--compute", &a.compute, {"bf16", "fp32"},
                 "compute dtype of the rows after full fine-tuning (default bf16; fp32 on a CPU without native bf16, "
                 "where bf16 products are emulated and slow, and drops the bf16-only row)");
  app.add_int("--seq", &a.seq, "tokens per sequence (default 64: model state dominates)", 1);
  app.add_int("--batch", &a.batch, "sequences per rank per step (default 2)", 1);
  app.add_int("--steps", &a.steps, "steps per row, the first not timed (default 4)", 2);
  app.add_int("--lora-rank", &a.lora_rank,
              "LoRA rank on qkv, proj, fc and out (llama: the seven projections) (default 8)", 1);
  app.add_text("--dir", &a.dir, "where the pretrained weights and the NVMe state go (default: the build tree)", "DIR");
  app.add_config_options();
  if (!app.parse(argv, print)) return std::nullopt;
  if (a.llama()) {  // the 1.1B shape, where not given
    if (!app.given("--dim")) a.dim = 2048;
    if (!app.given("--layers")) a.layers = 22;
    if (!app.given("--heads")) a.heads = 32;
  }
  return a;
}

struct Row {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  bool checkpointing = false;
  bool lora = false;
  bool nvme = false;
  bool nf4 = false;
  // Measured:
  int64_t trainable = 0;
  int64_t peak_bytes = 0;
  double step_s = 0;
};

zm::GptOptions model_options(const Args& a, bool checkpointing) {
  zm::GptOptions o;
  o.d_model = a.dim;
  o.n_layer = a.layers;
  o.n_head = a.heads;
  o.seq_len = a.seq;
  o.dropout = 0;
  o.checkpointing.enabled = checkpointing;
  return o;
}

int64_t max_over_ranks(zs::Session& s, int64_t v, const char* tag) {
  at::Tensor t = at::full({1}, static_cast<double>(v), at::kDouble);
  s.world()->all_reduce(t, zs::ReduceOp::kMax, tag)->wait();
  return static_cast<int64_t>(t.item<double>());
}

// The pretrained weights every row starts from: a model built with seed 1, written by rank 0.
void export_base(zs::Session& s, const Args& a, const std::string& path) {
  if (s.rank() == 0) {
    torch::manual_seed(1);
    zm::Gpt model(model_options(a, false));
    std::vector<zs::TensorInfo> infos;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& p : model->named_parameters()) {
      bool tied = false;
      for (const auto& [n, t] : tensors) tied = tied || t.is_same(p.value());
      if (tied) continue;  // the output layer is the token embedding
      infos.push_back({p.key(), c10::kFloat, p.value().sizes().vec()});
      tensors.emplace_back(p.key(), p.value());
    }
    zs::SafetensorsWriter w(path, infos);
    for (const auto& [n, t] : tensors) w.write(n, t.detach());
    w.finish();
  }
  s.world()->barrier("bench.finetune.export")->wait();
}

// AdamW; its state on NVMe in the rows that say so.
std::unique_ptr<zs::ShardedOptimizer> make_row_optimizer(zs::Session& s, const Args& a, zs::ShardingEngine& engine,
                                                        const Row& r) {
  zs::OptimizerOptions oc;
  oc.lr = 1e-4;
  if (!r.nvme) return zs::make_optimizer(oc);
  zs::OffloadOptions oo;
  oo.target = zs::OffloadTarget::kNvme;
  oo.nvme_path = a.dir + "/bench_finetune_nvme";
  fs::create_directories(oo.nvme_path);
  return std::make_unique<zs::OffloadedOptimizer>(oc, oo, s.rank(), &engine.memory());
}

// The loss of one step's batch, computed inside the engine's forward.
using LossOfStep = std::function<at::Tensor()>;

// The row's steps: AdamW (on NVMe where the row says), a batch per step drawn from a generator
// seeded by step and rank (outside the timed part), forward, backward, clipping, the optimizer
// step. Fills the row's trainable count, peak (allocator, max over ranks) and median step time
// after the first step.
void measure_steps(zs::Session& s, const Args& a, zs::ShardingEngine& engine, Row& r,
                   const std::function<LossOfStep(at::Generator&)>& batch) {
  std::unique_ptr<zs::ShardedOptimizer> opt = make_row_optimizer(s, a, engine, r);
  r.trainable = engine.num_trainable_params();
  zs::reset_host_memory_peak();
  std::vector<double> times;
  for (int step = 0; step < a.steps; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(100 * step + s.rank());
    const LossOfStep loss_of = batch(g);
    const double seconds = zs_bench::time_step(*s.world(), [&] {
      at::Tensor loss = engine.forward(loss_of);
      loss.backward();
      engine.clip_grad_norm(1.0);
      engine.step(*opt);
      engine.zero_grad();
    });
    if (step > 0) times.push_back(seconds);
  }
  r.peak_bytes = max_over_ranks(s, zs::host_memory_stats().peak, "bench.finetune.peak");
  r.step_s = zs_bench::median(times);
}

void run_row(zs::Session& s, const Args& a, const std::string& base, Row& r) {
  torch::manual_seed(2);
  zm::Gpt model(model_options(a, r.checkpointing));
  if (r.lora) {
    zs::lora::Options lo;
    lo.rank = a.lora_rank;
    lo.alpha = 2.0 * static_cast<double>(a.lora_rank);
    lo.targets = {"*.qkv", "*.proj", "*.fc", "*.out"};
    zs::lora::apply(*model, lo);
  }
  zs::ShardingOptions so;
  so.param_dtype = r.dtype;
  so.reduce_dtype = r.dtype;
  if (r.nf4) so.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  zs::ShardingEngine engine(s, model.ptr(), so);
  zs::PretrainedOptions po;
  po.not_required = {"*lora_A", "*lora_B"};
  zs::load_pretrained(engine, base, po);
  measure_steps(s, a, engine, r, [&](at::Generator& g) -> LossOfStep {
    const at::Tensor x = torch::randint(256, {a.batch, a.seq}, g), y = torch::randint(256, {a.batch, a.seq}, g);
    return [&model, x, y] { return zs_bench::lm_loss(model->forward(x).to(at::kFloat), y); };
  });
}

// The Llama-family shape of the options (untied head, HF's initialisation).
zm::LlamaConfig llama_config(const Args& a) {
  zm::LlamaConfig c;
  c.path = "bench_finetune --model llama";
  c.model_type = "llama";
  c.vocab_size = a.vocab;
  c.hidden_size = a.dim;
  c.intermediate_size = a.intermediate;
  c.num_hidden_layers = a.layers;
  c.num_attention_heads = a.heads;
  c.num_key_value_heads = a.kv_heads;
  c.head_dim = a.dim / a.heads;
  c.max_position_embeddings = std::max<int64_t>(2048, a.seq);
  c.rms_norm_eps = 1e-5;
  return c;
}

int64_t llama_params(const zm::LlamaConfig& c) {
  int64_t n = 0;
  for (const zs::TensorInfo& t : zm::hf_tensors(c)) n += t.numel();
  return n;
}

// One Llama row: the model built sharded (same seed every row), adapters as each layer is built.
void run_llama_row(zs::Session& s, const Args& a, Row& r) {
  const zm::LlamaConfig cfg = llama_config(a);
  zs::ShardingOptions so;
  so.param_dtype = r.dtype;
  so.reduce_dtype = r.dtype;
  if (r.lora) {
    zs::lora::Options lo;
    lo.rank = a.lora_rank;
    lo.alpha = 2.0 * static_cast<double>(a.lora_rank);
    lo.targets = {"*.q_proj", "*.k_proj", "*.v_proj", "*.o_proj", "*.gate_proj", "*.up_proj", "*.down_proj"};
    so.unit_hooks.push_back(zs::lora::unit_hook(lo));
  }
  if (r.nf4) so.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  torch::manual_seed(1);
  zs::ShardedInit init(s, so);
  zm::LlamaForCausalLM model(zm::LlamaOptions{cfg, s.device(), r.checkpointing});
  zs::ShardingEngine engine(init, model.ptr());
  measure_steps(s, a, engine, r, [&](at::Generator& g) -> LossOfStep {
    const at::Tensor ids = torch::randint(a.vocab, {a.batch, a.seq}, g);
    return [&model, ids] { return zm::causal_lm_loss(model->forward(ids), ids); };
  });
}

}  // namespace

int main(int argc, char** argv) {
  zs::install_host_memory_tracking();  // before any tensor we want to count
  const zs::Program program{"bench_finetune", {}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run&) {
    ZS_REQUIRE(zs::host_memory_tracking_installed(), zs::UsageError,
               "this LibTorch's CPU allocator cannot be wrapped for measurement (no raw deleter)");
    ZS_REQUIRE(s.device().is_cpu(), zs::UsageError, "bench_finetune measures host memory: run it with runtime.device=CPU");
    const std::optional<Args> parsed = parse(s.args(), s.rank() == 0);
    if (!parsed) return 0;
    const Args& a = *parsed;
    fs::create_directories(a.dir);
    const std::string base = a.dir + "/bench_finetune_base.safetensors";
    if (!a.llama()) export_base(s, a, base);
    const c10::ScalarType dt = a.compute == "fp32" ? c10::kFloat : c10::kBFloat16;
    std::vector<Row> rows = {
        {"full fine-tune, fp32", c10::kFloat, false, false, false},
        {"full, optimizer state on NVMe", c10::kFloat, false, false, true},
    };
    if (dt == c10::kBFloat16) rows.push_back({"bf16 compute", dt, false, false, false});
    const std::vector<Row> adapted = {
        {"+ activation checkpointing", dt, true, false, false},
        {"+ LoRA (rank " + std::to_string(a.lora_rank) + ")", dt, true, true, false},
        {"+ optimizer state on NVMe", dt, true, true, true},
        {"LoRA + NF4 base (QLoRA)", dt, true, true, false, true},
        {"LoRA + NF4 + optimizer on NVMe", dt, true, true, true, true},
    };
    rows.insert(rows.end(), adapted.begin(), adapted.end());
    for (Row& r : rows) {
      if (a.llama()) {
        run_llama_row(s, a, r);
      } else {
        run_row(s, a, base, r);
      }
    }
    const int64_t params = a.llama() ? llama_params(llama_config(a)) : model_options(a, false).num_params();
    if (s.rank() == 0) {
      if (a.llama()) {
        std::printf("bench_finetune: Llama hidden %lld, %lld layers, %lld heads (%lld key/value), intermediate %lld, "
                    "vocab %lld, %.1fM parameters; %lld x %lld tokens per rank per step, AdamW, FULL_SHARD over %d "
                    "rank(s), %s compute after the first two rows; peak = allocator's live bytes during the steps, max over "
                    "ranks\n",
                    (long long)a.dim, (long long)a.layers, (long long)a.heads, (long long)a.kv_heads,
                    (long long)a.intermediate, (long long)a.vocab, params / 1e6, (long long)a.batch, (long long)a.seq,
                    s.world_size(), a.compute.c_str());
      } else {
        std::printf("bench_finetune: GPT d_model %lld, %lld layers, %lld heads, %.1fM parameters; %lld x %lld tokens "
                    "per rank per step, AdamW, FULL_SHARD over %d rank(s), %s compute after the first two rows; peak = "
                    "allocator's live bytes during the steps, max over ranks\n",
                    (long long)a.dim, (long long)a.layers, (long long)a.heads, params / 1e6, (long long)a.batch,
                    (long long)a.seq, s.world_size(), a.compute.c_str());
      }
      std::printf("  %-32s %12s %14s %10s %10s\n", "row", "trainable", "peak MiB/rank", "saving", "step s");
      for (const Row& r : rows) {
        std::printf("  %-32s %12lld %14.1f %9.1f%% %10.2f\n", r.name.c_str(), (long long)r.trainable,
                    r.peak_bytes / 1048576.0, 100.0 * (1.0 - static_cast<double>(r.peak_bytes) / rows[0].peak_bytes),
                    r.step_s);
      }
      std::ostringstream js;
      js << "{\"bench\":\"finetune\",\"model\":\"" << a.model << "\",\"ranks\":" << s.world_size()
         << ",\"params\":" << params << ",\"rows\":[";
      for (size_t i = 0; i < rows.size(); ++i) {
        js << (i ? "," : "") << "{\"name\":\"" << rows[i].name << "\",\"trainable\":" << rows[i].trainable
           << ",\"peak_bytes\":" << rows[i].peak_bytes << ",\"step_s\":" << rows[i].step_s << "}";
      }
      js << "]}";
      std::printf("%s\n", js.str().c_str());
    }
    s.world()->barrier("bench.finetune.end")->wait();
    if (s.rank() == 0) {
      fs::remove_all(a.dir + "/bench_finetune_nvme");
      if (!a.llama()) fs::remove(base);
    }
    return 0;
  });
}
