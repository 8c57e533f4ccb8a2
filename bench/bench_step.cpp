// SPDX-License-Identifier: Apache-2.0
// bench_step: training steps of the same GPT-style model, (a) plain LibTorch and (b) zeroshard,
// in one run.
//
// CPU (the session's device is the CPU, or --device cpu), at the world size mpirun gives (1, 2, 4):
//   mpirun -n 2 build/bin/bench_step [--dim 128] [--layers 4] [--seq 32] [--vocab 256] [--batch 8]
//                                     [--steps 12] [--strategy FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD]
// CUDA (--device cuda, or auto on a GPU machine): see bench_step_gpu.cpp for the presets
// (--preset gpt-1.3b | gpt-offload), tokens/s and MFU.
//
// On the CPU every rank trains on its own local batch in both variants at the same time, so both
// see the same CPU contention; (a) has no communication at all. Reported:
//   step time (median after 2 warm-up steps; the variants alternate step by step) of both and the
//   overhead = median over steps of t(zs)/t(plain) - 1; at N > 1
//   that difference is the communication left exposed by overlap (goal <= 15% at 2 ranks on CPU),
//   at N = 1 it is the engine's own cost (goal <= 3%);
//   model-state bytes per rank as the allocator sees them (the host tracking allocator, or the
//   CUDA caching allocator: what the zeroshard model's construction, wrapping and one step with
//   gradients left allocated; fp32 params + grads + Adam moments) vs the ZeRO formula 16*Psi/N
//   (goal within 5%), with the engine's own accounting beside it;
//   elements communicated per step vs the formula (3*Psi FULL_SHARD/HYBRID, 2*Psi others), on the
//   padded sizes; the root unit (embeddings, final norm) stays gathered through the step, as in
//   FSDP, so FULL_SHARD moves 3*Psi - Psi_root.
// Final line: JSON.

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "bench_step.h"
#include "bench_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;

namespace zs_bench {

namespace {

// A ~1.3B-parameter GPT (GPT-3 XL shape; GPT-2 vocabulary padded to a multiple of 64): 24 blocks
// of width 2048, 16 heads, 2048 tokens, in bf16 with every block checkpointed.
void apply_preset(const std::string& name, StepArgs& a) {
  if (name == "gpt-1.3b" || name == "gpt-offload") {
    a.model = zs_test::GptConfig{50304, 2048, 16, 24, 2048};
    a.model.fused_attention = zs_test::kHasFusedAttention;
    a.batch = name == "gpt-1.3b" ? 8 : 4;
    a.steps = name == "gpt-1.3b" ? 12 : 6;
    a.dtype = "bf16";
    a.checkpoint = true;
    return;
  }
  ZS_THROW(zeroshard::UsageError, "--preset '", name, "' is not one of gpt-1.3b, gpt-offload");
}

}  // namespace

std::optional<StepArgs> parse_step_args(const std::vector<std::string>& args, bool session_cuda, bool print) {
  StepArgs o;
  o.model = zs_test::GptConfig{256, 128, 4, 4, 32};
  o.steps = 12;
  zeroshard::cli::App app("bench_step",
                          "One training step of a GPT, zeroshard against plain LibTorch on the same batches: "
                          "step time, tokens/s and (CUDA) MFU. Final line: JSON.");
  app.usage("mpirun -n N bench_step [OPTIONS]");
  // The preset first: flags added after it override it wherever they stand on the line.
  bool gpu_only_flag = false;
  app.add_choice("--preset", &o.preset, {"gpt-1.3b", "gpt-offload"}, "CUDA: a 1.3B GPT (gpt-offload: with offload)");
  app.then([&] {
    if (!o.preset.empty()) apply_preset(o.preset, o), gpu_only_flag = true;
  });
  add_gpt_bench_args(app, o, -1);
  app.add_int("--batch", &o.batch, "sequences per rank per step (default 8)", 1);
  app.add_int("--steps", &o.steps, "steps, the first --warmup not timed (default 12)", 1);
  app.add_choice("--device", &o.device, {"auto", "cpu", "cuda"}, "auto: the session's device (runtime.device)");
  app.add_choice("--strategy", &o.strategy, {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"},
                 "sharding strategy (default FULL_SHARD)");
  app.add_choice("--dtype", &o.dtype, {"fp32", "bf16"}, "CUDA: bf16 param/reduce dtype (plain: autocast)");
  std::string checkpoint, attention, plain;
  app.add_choice("--checkpoint", &checkpoint, {"0", "1"}, "CUDA: activation checkpointing of every block");
  app.add_choice("--attention", &attention, {"naive", "fused"}, "fused: scaled_dot_product_attention (LibTorch 2.x)");
  app.add_number("--peak-tflops", &o.peak_tflops, "CUDA: peak for MFU (default: the H100/H200 datasheet's)", 0);
  app.add_choice("--plain", &plain, {"0", "1"}, "CUDA: also train plain LibTorch, the reference (default 1)");
  app.add_int("--warmup", &o.warmup, "steps not timed (default 2)", 1);
  app.add_config_options();
  app.then([&] {
    if (!checkpoint.empty()) o.checkpoint = checkpoint == "1";
    if (!plain.empty()) o.plain = plain == "1";
    if (!attention.empty()) o.model.fused_attention = attention == "fused";
    gpu_only_flag = gpu_only_flag || o.dtype != "fp32" || o.checkpoint || o.model.fused_attention ||
                    o.peak_tflops > 0 || !o.plain;
    if (o.steps <= o.warmup) {
      app.fail("--steps (" + std::to_string(o.steps) + ") must exceed --warmup (" + std::to_string(o.warmup) + ")");
    }
    if (o.model.fused_attention && !zs_test::kHasFusedAttention) {
      app.fail("--attention fused needs LibTorch 2.x (scaled_dot_product_attention); this build's is older");
    }
    o.cuda = o.device == "cuda" || (o.device == "auto" && session_cuda);
    if (!o.cuda && gpu_only_flag) {
      app.fail("--preset, --dtype bf16, --checkpoint 1, --attention fused, --peak-tflops and --plain 0 apply to the "
               "CUDA benchmark; this run is on the CPU (--device " + o.device + ")");
    }
  });
  if (!app.parse(args, print)) return std::nullopt;
  return o;
}

}  // namespace zs_bench

namespace {

using Args = zs_bench::StepArgs;

using zs_bench::median;
using zs_bench::time_step;

using zs_bench::lm_loss;

std::pair<torch::Tensor, torch::Tensor> batch_for(const Args& a, int rank, int step) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(100000 * rank + step);
  return {torch::randint(a.model.vocab, {a.batch, a.model.seq}, g), torch::randint(a.model.vocab, {a.batch, a.model.seq}, g)};
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_step", {zs::keys::engine(), {"optimizer", "offload"}}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run& run) {
    const std::optional<Args> parsed = zs_bench::parse_step_args(run.args, s.device().is_cuda(), s.rank() == 0);
    if (!parsed) return 0;  // --help, --version
    const Args& a = *parsed;
    const bool cuda = a.cuda;
    ZS_REQUIRE(!cuda || s.device().is_cuda(), zs::UsageError, "--device cuda but this session's device is ",
               s.device().str(), " (runtime.device = ", zs::to_string(run.options.session.device),
               "); run on a GPU machine with a CUDA-enabled LibTorch, or pass --set runtime.device=CUDA");
    if (cuda) return zs_bench::run_gpu_step_bench(s, run.options, a);
    const int n = s.world_size(), rank = s.rank();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, static_cast<int>(cores) / s.local_world_size()));
    auto& world = *s.world();

    // (a) plain LibTorch on the local batch.
    torch::manual_seed(1);
    zs_test::Gpt plain(a.model);
    std::vector<torch::Tensor> params;
    std::unordered_set<const void*> seen;
    int64_t psi = 0;
    for (auto& p : plain->parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p), psi += p.numel();
    }
    torch::optim::AdamW popt(params, torch::optim::AdamWOptions(1e-3));
    auto plain_step = [&](int step) {
      auto [x, y] = batch_for(a, rank, step);
      popt.zero_grad();
      lm_loss(plain->forward(x), y).backward();
      popt.step();
    };

    // (b) zeroshard. Everything the allocator holds from here on that outlives a step is its
    // model state: one plain step first, so that the plain model's gradients and Adam moments
    // are allocated already.
    plain_step(0);
    const zs::DeviceMemoryUse before_zs = zs::device_memory_use();
    torch::manual_seed(1);
    zs_test::Gpt model(a.model);
    zs::ShardingOptions o;
    const zs::ShardingStrategy strategy = zs_bench::parse_strategy(a.strategy);
    o.strategy = strategy;
    zs::ShardingEngine engine(s, model.ptr(), o);
    zs::AdamOptions ao;
    auto opt = zs::make_adamw(ao);
    int64_t comm_elements = 0;
    auto zs_step = [&](int step) {
      auto [x, y] = batch_for(a, rank, step);
      engine.reset_comm_counters();
      engine.forward([&] { return lm_loss(model->forward(x), y); }).backward();
      engine.step(*opt);
      comm_elements = engine.comm_counters().all_gather_elements + engine.comm_counters().reduce_elements;
      engine.zero_grad();
    };
    // The two run alternately, step by step, so slow phases of the machine hit both alike; the
    // overhead is the median of the per-step ratios.
    std::vector<double> tp, tz, ratios;
    for (int step = 0; step < a.steps; ++step) {
      double p = time_step(world, [&] { plain_step(step); });
      double z = time_step(world, [&] { zs_step(step); });
      if (step >= a.warmup) tp.push_back(p), tz.push_back(z), ratios.push_back(z / p);
    }
    const double t_plain = median(tp), t_zs = median(tz);
    // One more step to read the model state with gradients present.
    {
      auto [x, y] = batch_for(a, rank, 0);
      engine.forward([&] { return lm_loss(model->forward(x), y); }).backward();
      engine.step(*opt);
    }
    const zs::DeviceMemoryUse after_zs = zs::device_memory_use();
    ZS_REQUIRE(before_zs.known && after_zs.known, zs::UsageError, "bench_step measures model state with the host "
               "allocator: run with memory.track_allocations = true (the default)");
    const int64_t state_bytes = after_zs.current - before_zs.current;
    const int64_t accounted_bytes = engine.memory().persistent();
    const int64_t padded = engine.num_padded_trainable_params();
    const int group = engine.shard_group_size();
    const double formula_bytes = 16.0 * padded / group;
    const bool three = strategy == zs::ShardingStrategy::kFullShard || strategy == zs::ShardingStrategy::kHybridShard;
    const double formula_elements = n == 1 ? 0.0 : (three ? 3.0 : 2.0) * padded;
    const double overhead = median(ratios) - 1.0;
    if (rank == 0) {
      std::printf("bench_step: GPT dim=%lld layers=%lld seq=%lld vocab=%lld, %lld params, local batch %lld, %d rank(s), %s, %d intra-op thread(s)\n",
                  (long long)a.model.dim, (long long)a.model.layers, (long long)a.model.seq, (long long)a.model.vocab,
                  (long long)psi, (long long)a.batch, n, a.strategy.c_str(), at::get_num_threads());
      std::printf("  step time      plain LibTorch %8.2f ms   zeroshard %8.2f ms   overhead %+.1f%%\n", t_plain * 1e3,
                  t_zs * 1e3, overhead * 100);
      std::printf("  model state    allocator %10.3f MiB/rank   16*Psi/N %10.3f MiB   ratio %.4f   (engine accounting %.3f MiB)\n",
                  state_bytes / 1048576.0, formula_bytes / 1048576.0, state_bytes / formula_bytes,
                  accounted_bytes / 1048576.0);
      std::printf("  communicated   %lld elements/step   formula %.0f   ratio %.4f\n", (long long)comm_elements,
                  formula_elements, formula_elements > 0 ? comm_elements / formula_elements : 0.0);
      std::printf("%s", engine.memory_report().c_str());
      std::ostringstream js;
      js << "{\"bench\":\"step\",\"ranks\":" << n << ",\"strategy\":\"" << a.strategy << "\",\"params\":" << psi
         << ",\"padded_params\":" << padded << ",\"plain_step_s\":" << t_plain << ",\"zs_step_s\":" << t_zs
         << ",\"overhead\":" << overhead << ",\"model_state_bytes_per_rank\":" << state_bytes
         << ",\"accounted_state_bytes_per_rank\":" << accounted_bytes
         << ",\"formula_bytes\":" << formula_bytes << ",\"state_ratio\":" << state_bytes / formula_bytes
         << ",\"comm_elements_per_step\":" << comm_elements << ",\"formula_elements\":" << formula_elements
         << ",\"peak_gathered_bytes\":" << engine.memory().peak(zs::MemCategory::kGatheredParams) << "}";
      std::printf("%s\n", js.str().c_str());
    }
    return 0;
  });
}
