// SPDX-License-Identifier: Apache-2.0
// bench_finetune: what fine-tuning a >= 100M-parameter GPT costs in memory and time, row by row,
// in one run: full fine-tuning in fp32, bf16 compute, + activation checkpointing, + LoRA, + LoRA
// with the optimizer state on NVMe, + LoRA over an NF4 base (QLoRA), + both. Every row starts
// from the same pretrained weights, which the benchmark itself creates and exports first
// (safetensors, loaded with load_pretrained; NF4 rows quantise each unit as it is loaded).
//
//   mpirun -n 2 build/bin/bench_finetune [--dim 768] [--layers 15] [--seq 64] [--batch 2] [--steps 4]
//                                        [--lora-rank 8] [--dir DIR]
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

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace {

struct Args {
  int64_t dim = 768, layers = 15, heads = 12, seq = 64, batch = 2;
  int steps = 4;
  int64_t lora_rank = 8;
  std::string dir = ZS_BENCH_DEFAULT_DIR;
};

std::optional<Args> parse(const std::vector<std::string>& argv, bool print) {
  Args a;
  zs::cli::App app("bench_finetune",
                   "Memory and step time of fine-tuning a GPT from pretrained weights: fp32, bf16, + checkpointing, "
                   "+ LoRA, + NVMe optimizer state, + NF4 base, in one run. Final line: JSON.");
  app.usage("mpirun -n N bench_finetune [OPTIONS]");
  app.add_int("--dim", &a.dim, "model width (default 768)", 1);
  app.add_int("--layers", &a.layers, "blocks (default 15: 106M parameters at --dim 768)", 1);
  app.add_int("--heads", &a.heads, "attention heads (default 12)", 1);
  app.add_int("--seq", &a.seq, "tokens per sequence (default 64: model state dominates)", 1);
  app.add_int("--batch", &a.batch, "sequences per rank per step (default 2)", 1);
  app.add_int("--steps", &a.steps, "steps per row, the first not timed (default 4)", 2);
  app.add_int("--lora-rank", &a.lora_rank, "LoRA rank on qkv, proj, fc and out (default 8)", 1);
  app.add_text("--dir", &a.dir, "where the pretrained weights and the NVMe state go (default: the build tree)", "DIR");
  app.add_config_options();
  if (!app.parse(argv, print)) return std::nullopt;
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
  zs::OptimizerOptions oc;  // AdamW
  oc.lr = 1e-4;
  std::unique_ptr<zs::ShardedOptimizer> opt;
  if (r.nvme) {
    zs::OffloadOptions oo;
    oo.target = zs::OffloadTarget::kNvme;
    oo.nvme_path = a.dir + "/bench_finetune_nvme";
    fs::create_directories(oo.nvme_path);
    opt = std::make_unique<zs::OffloadedOptimizer>(oc, oo, s.rank(), &engine.memory());
  } else {
    opt = zs::make_optimizer(oc);
  }
  r.trainable = engine.num_trainable_params();
  zs::reset_host_memory_peak();
  std::vector<double> times;
  for (int step = 0; step < a.steps; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(100 * step + s.rank());
    const at::Tensor x = torch::randint(256, {a.batch, a.seq}, g), y = torch::randint(256, {a.batch, a.seq}, g);
    const double seconds = zs_bench::time_step(*s.world(), [&] {
      at::Tensor loss = engine.forward([&] { return zs_bench::lm_loss(model->forward(x).to(at::kFloat), y); });
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
    export_base(s, a, base);
    std::vector<Row> rows = {
        {"full fine-tune, fp32", c10::kFloat, false, false, false},
        {"bf16 compute", c10::kBFloat16, false, false, false},
        {"+ activation checkpointing", c10::kBFloat16, true, false, false},
        {"+ LoRA (rank " + std::to_string(a.lora_rank) + ")", c10::kBFloat16, true, true, false},
        {"+ optimizer state on NVMe", c10::kBFloat16, true, true, true},
        {"LoRA + NF4 base (QLoRA)", c10::kBFloat16, true, true, false, true},
        {"LoRA + NF4 + optimizer on NVMe", c10::kBFloat16, true, true, true, true},
    };
    for (Row& r : rows) run_row(s, a, base, r);
    const int64_t params = model_options(a, false).num_params();
    if (s.rank() == 0) {
      std::printf("bench_finetune: GPT d_model %lld, %lld layers, %lld heads, %.1fM parameters; %lld x %lld tokens per "
                  "rank per step, AdamW, FULL_SHARD over %d rank(s); peak = allocator's live bytes during the steps, "
                  "max over ranks\n",
                  (long long)a.dim, (long long)a.layers, (long long)a.heads, params / 1e6, (long long)a.batch,
                  (long long)a.seq, s.world_size());
      std::printf("  %-32s %12s %14s %10s %10s\n", "row", "trainable", "peak MiB/rank", "saving", "step s");
      for (const Row& r : rows) {
        std::printf("  %-32s %12lld %14.1f %9.1f%% %10.2f\n", r.name.c_str(), (long long)r.trainable,
                    r.peak_bytes / 1048576.0, 100.0 * (1.0 - static_cast<double>(r.peak_bytes) / rows[0].peak_bytes),
                    r.step_s);
      }
      std::ostringstream js;
      js << "{\"bench\":\"finetune\",\"ranks\":" << s.world_size() << ",\"params\":" << params << ",\"rows\":[";
      for (size_t i = 0; i < rows.size(); ++i) {
        js << (i ? "," : "") << "{\"name\":\"" << rows[i].name << "\",\"trainable\":" << rows[i].trainable
           << ",\"peak_bytes\":" << rows[i].peak_bytes << ",\"step_s\":" << rows[i].step_s << "}";
      }
      js << "]}";
      std::printf("%s\n", js.str().c_str());
    }
    s.world()->barrier("bench.finetune.end")->wait();
    if (s.rank() == 0) fs::remove_all(a.dir + "/bench_finetune_nvme"), fs::remove(base);
    return 0;
  });
}
