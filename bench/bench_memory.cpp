// SPDX-License-Identifier: Apache-2.0
// bench_memory: activation memory and step time of a GPT-style model with and without activation
// checkpointing, with fp32 and bf16 parameters, in one run (under mpirun at any world size).
//
//   mpirun -n 1 build/bin/bench_memory [--dim 128] [--layers 4] [--seq 128] [--batch 8] [--steps 6]
//
// Host memory is measured by a tracking CPU allocator (zeroshard/core/host_memory.h): activation
// memory of a step = peak bytes during forward+backward minus the bytes live before it (model
// state). The plain and checkpointed variants alternate step by step; step time = median after one
// warm-up, extra time of checkpointing = median of the per-step ratios. Gathered-parameter bytes and
// all-gather bytes come from the engine's accounting (elements x dtype size). Goals: checkpointing
// cuts activation memory by >= 50% at <= 40% extra step time; bf16 halves gathered and all-gather
// bytes exactly. Final line: JSON.

#include <torch/nn/functional/loss.h>

#include <ATen/ops/full.h>

#include <algorithm>
#include <memory>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "gpt_bench_args.h"
#include "engine/models.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;

namespace {

using Args = zs_bench::GptBenchArgs;

// Returns nullopt after --help/--version (printed when `print`).
std::optional<Args> parse(const std::vector<std::string>& args, bool print) {
  Args a;
  a.model = zs_test::GptConfig{256, 128, 4, 4, 128};
  a.steps = 6;
  zs::cli::App app("bench_memory",
                   "Activation memory and step time of a GPT with and without activation checkpointing, fp32 and "
                   "bf16, in one run. Final line: JSON.");
  app.usage("mpirun -n N bench_memory [OPTIONS]");
  zs_bench::add_gpt_bench_args(app, a, 1);
  app.add_config_options();
  if (!app.parse(args, print)) return std::nullopt;
  return a;
}

struct Result {
  std::string name;
  bool checkpointing;
  c10::ScalarType dtype;
  double step_s = 0;
  int64_t activation_bytes = 0;
  int64_t gathered_peak_bytes = 0;
  int64_t all_gather_bytes = 0;
};

// One model + engine + optimizer, stepping with or without checkpointing.
struct Variant {
  Variant(zs::Session& s, const Args& a, bool ckpt, c10::ScalarType dtype) : ckpt(ckpt), dtype(dtype) {
    torch::manual_seed(1);
    model = zs_test::Gpt(a.model);
    zs::ShardingOptions o;
    o.param_dtype = dtype;
    o.reduce_dtype = dtype;
    engine = std::make_unique<zs::ShardingEngine>(s, model.ptr(), o);
    opt = zs::make_adamw(zs::AdamOptions{});
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor pos = torch::arange(idx.size(1), torch::kLong);
    torch::Tensor x = model->wte(idx) + model->wpe(pos);
    for (auto& b : model->blocks) {
      x = ckpt ? zs::checkpoint([&b](const at::Tensor& t) { return b(t); }, x) : b(x);
    }
    return torch::nn::functional::linear(model->ln_f(x), model->wte->weight);
  }
  // One step; returns {seconds, activation bytes}.
  std::pair<double, double> step(zs::Session& s, const torch::Tensor& x, const torch::Tensor& y) {
    s.world()->barrier("bench.mem")->wait();
    engine->reset_comm_counters();
    zs::begin_host_memory_window();
    auto t0 = std::chrono::steady_clock::now();
    torch::Tensor logits = engine->forward([&] { return forward(x); });
    torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1})).backward();
    const int64_t peak = zs::host_memory_window_peak();
    engine->step(*opt);
    engine->zero_grad();
    all_gather_bytes = engine->comm_counters().all_gather_elements * static_cast<int64_t>(c10::elementSize(dtype));
    at::Tensor t = torch::full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                               torch::kDouble);
    s.world()->all_reduce(t, zs::ReduceOp::kMax, "bench.mem.time")->wait();  // the slowest rank
    return {t.item<double>(), static_cast<double>(peak)};
  }
  bool ckpt;
  c10::ScalarType dtype;
  zs_test::Gpt model{nullptr};
  std::unique_ptr<zs::ShardingEngine> engine;
  std::unique_ptr<zs::ShardedOptimizer> opt;
  int64_t all_gather_bytes = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The plain and checkpointed variants of one dtype step alternately, so slow phases of the machine
// hit both; the extra time is the median of the per-step ratios.
std::pair<Result, Result> measure_pair(zs::Session& s, const Args& a, c10::ScalarType dtype, double* extra) {
  Variant plain(s, a, false, dtype), ckpt(s, a, true, dtype);
  std::vector<double> tp, tc, ap, ac, ratios;
  for (int step = 0; step < a.steps; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(step);
    torch::Tensor x = torch::randint(a.model.vocab, {a.batch, a.model.seq}, g);
    torch::Tensor y = torch::randint(a.model.vocab, {a.batch, a.model.seq}, g);
    auto [t1, m1] = plain.step(s, x, y);
    auto [t2, m2] = ckpt.step(s, x, y);
    if (step >= 1) tp.push_back(t1), tc.push_back(t2), ap.push_back(m1), ac.push_back(m2), ratios.push_back(t2 / t1);
  }
  *extra = median(ratios) - 1.0;
  auto result = [&](Variant& v, std::vector<double>& t, std::vector<double>& m) {
    Result r;
    r.name = std::string(v.ckpt ? "checkpointed" : "plain") + " " + c10::toString(dtype);
    r.checkpointing = v.ckpt;
    r.dtype = dtype;
    r.step_s = median(t);
    r.activation_bytes = static_cast<int64_t>(median(m));
    r.gathered_peak_bytes = v.engine->memory().peak(zs::MemCategory::kGatheredParams);
    r.all_gather_bytes = v.all_gather_bytes;
    return r;
  };
  return {result(plain, tp, ap), result(ckpt, tc, ac)};
}

}  // namespace

int main(int argc, char** argv) {
  zs::install_host_memory_tracking();  // before any tensor we want to count
  const zs::Program program{"bench_memory", {}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run&) {
    ZS_REQUIRE(zs::host_memory_tracking_installed(), zs::UsageError,
               "this LibTorch's CPU allocator cannot be wrapped for measurement (no raw deleter)");
    const std::optional<Args> parsed = parse(s.args(), s.rank() == 0);
    if (!parsed) return 0;  // --help, --version
    const Args& a = *parsed;
    std::vector<Result> rs;
    double extra_time = 0, extra_bf16 = 0;
    for (auto dtype : {c10::kFloat, c10::kBFloat16}) {
      auto [plain, ckpt] = measure_pair(s, a, dtype, dtype == c10::kFloat ? &extra_time : &extra_bf16);
      rs.push_back(plain);
      rs.push_back(ckpt);
    }
    auto find = [&](bool ckpt, c10::ScalarType d) {
      for (auto& r : rs) {
        if (r.checkpointing == ckpt && r.dtype == d) return r;
      }
      return rs.front();
    };
    const Result p32 = find(false, c10::kFloat), c32 = find(true, c10::kFloat), p16 = find(false, c10::kBFloat16);
    const double act_cut = 1.0 - static_cast<double>(c32.activation_bytes) / p32.activation_bytes;
    const double gathered_ratio = p32.gathered_peak_bytes ? static_cast<double>(p16.gathered_peak_bytes) / p32.gathered_peak_bytes : 0;
    const double ag_ratio = p32.all_gather_bytes ? static_cast<double>(p16.all_gather_bytes) / p32.all_gather_bytes : 0;
    if (s.rank() == 0) {
      std::printf("bench_memory: GPT dim=%lld layers=%lld seq=%lld batch=%lld, %d rank(s)\n", (long long)a.model.dim,
                  (long long)a.model.layers, (long long)a.model.seq, (long long)a.batch, s.world_size());
      std::printf("  %-22s %10s %16s %18s %16s\n", "variant", "step ms", "activation MiB", "gathered peak MiB", "all-gather MiB");
      for (auto& r : rs) {
        std::printf("  %-22s %10.1f %16.2f %18.3f %16.3f\n", r.name.c_str(), r.step_s * 1e3, r.activation_bytes / 1048576.0,
                    r.gathered_peak_bytes / 1048576.0, r.all_gather_bytes / 1048576.0);
      }
      std::printf("  checkpointing (fp32): activation memory -%.1f%% (goal >= 50%%), step time %+.1f%% (goal <= +40%%; bf16: %+.1f%%)\n",
                  act_cut * 100, extra_time * 100, extra_bf16 * 100);
      if (s.world_size() > 1) {
        std::printf("  bf16 / fp32: gathered params %.4f, all-gather bytes %.4f (goal 0.5 exactly)\n", gathered_ratio, ag_ratio);
      } else {
        std::printf("  bf16 / fp32 gathered bytes: not applicable at 1 rank (fp32 units are views of the shard); run with mpirun -n 2\n");
      }
      std::ostringstream js;
      js << "{\"bench\":\"memory\",\"ranks\":" << s.world_size() << ",\"activation_cut\":" << act_cut
         << ",\"checkpoint_extra_time\":" << extra_time << ",\"bf16_gathered_ratio\":" << gathered_ratio
         << ",\"bf16_all_gather_ratio\":" << ag_ratio << ",\"variants\":[";
      for (size_t i = 0; i < rs.size(); ++i) {
        js << (i ? "," : "") << "{\"name\":\"" << rs[i].name << "\",\"step_s\":" << rs[i].step_s
           << ",\"activation_bytes\":" << rs[i].activation_bytes << ",\"gathered_peak_bytes\":" << rs[i].gathered_peak_bytes
           << ",\"all_gather_bytes\":" << rs[i].all_gather_bytes << "}";
      }
      js << "]}";
      std::printf("%s\n", js.str().c_str());
    }
    return 0;
  });
}
