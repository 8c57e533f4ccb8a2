// SPDX-License-Identifier: Apache-2.0
// bench_step on CUDA: training throughput of one GPT model, (a) plain LibTorch and (b) zeroshard,
// one after the other in the same run (both would not fit on the GPU at once), on the same data.
//
//   build/bin/bench_step --preset gpt-1.3b          # 1.3B params, bf16, every block checkpointed
//   build/bin/bench_step --preset gpt-offload --set offload.optimizer=CPU
//   build/bin/bench_step --device cuda --dim 1024 --layers 8 --seq 1024 --batch 8 --dtype bf16 ...
//
// (a) plain: the model's fp32 parameters under LibTorch autocast (bf16) or in fp32,
//     torch::optim::AdamW, zeroshard::checkpoint around every block when --checkpoint 1.
// (b) zeroshard: ShardingEngine (--strategy, param and reduce dtype from --dtype over fp32 master
//     shards), the optimizer from the config's `optimizer` section on the device, or the offload
//     optimizer when offload.optimizer is CPU or NVME; the same checkpointing.
// Reported per variant: step time (median of the timed steps, each ended by a device
// synchronisation), tokens/s over all ranks, and model FLOPs utilisation:
//   MFU = tokens/s * (6 * N + 12 * L * d * T) / peak,
// N = the parameters that multiply activations (blocks and the tied output projection, not the
// position embedding), L layers, d width, T sequence length (PaLM's accounting: the attention
// term counts QK^T and AV forward and backward; recomputation of checkpointed blocks is not model
// FLOPs). peak: --peak-tflops, else the H100/H200 SXM datasheet's dense figure for the dtype, 989
// TFLOP/s bf16 (H200: the same chip) or 67 TFLOP/s fp32 (no TF32: LibTorch's default); printed.
// Final line: JSON with the ratio of zeroshard's tokens/s to plain LibTorch's.
//
// gpt-offload trains the largest GPT of a ladder (13B, 6.7B, 2.7B, 1.3B; skipping those whose
// host state, 16 bytes per parameter, exceeds 60% of MemAvailable: at 80% the 6.7B model was
// killed by the kernel's OOM killer on a 125 GiB H200 machine, 2026-11-26) that completes its steps; a
// size that runs out of GPU memory is reported and the next one tried. Plain LibTorch is tried on
// the same model and reported as out of memory where it is.

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "bench_step.h"
#include "bench_util.h"
#include "engine/models.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/engine/autocast.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"

#if ZS_BENCH_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif
// The offload optimizer: compiled in when its header is there.
#if __has_include("zeroshard/offload/offload_optimizer.h")
#include "zeroshard/offload/offload_optimizer.h"
#define ZS_BENCH_HAVE_OFFLOAD 1
#else
#define ZS_BENCH_HAVE_OFFLOAD 0
#endif

namespace zs = zeroshard;
using Clock = std::chrono::steady_clock;

namespace zs_bench {
namespace {

using namespace zeroshard;  // NOLINT: this file is one benchmark

struct Variant {
  explicit Variant(std::string n, std::string why_not = {}) : name(std::move(n)), error(std::move(why_not)) {}
  std::string name;
  bool ran = false;
  std::string error;  // why it did not run (e.g. out of memory)
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  int64_t peak_device_bytes = -1;  // caching allocator's peak, -1 when unknown
};

struct Model {
  zs_test::GptConfig cfg;
  int64_t params = 0;        // unique parameters
  int64_t flop_params = 0;   // N: parameters that multiply activations
  double flops_per_token = 0;
};

Model describe(const zs_test::GptConfig& cfg) {
  Model m{cfg};
  const int64_t d = cfg.dim, L = cfg.layers, V = cfg.vocab, T = cfg.seq;
  const int64_t block = 3 * d * d + (d * d + d) + 2 * (4 * d * d) + 4 * d + d + 4 * d;  // qkv, proj, fc, out, 2 LN
  m.params = L * block + V * d + T * d + 2 * d;                                          // + wte (tied), wpe, ln_f
  m.flop_params = L * block + V * d + 2 * d;
  m.flops_per_token = 6.0 * static_cast<double>(m.flop_params) + 12.0 * L * d * T;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  return std::string(e.what()).find("out of memory") != std::string::npos;
}

void release_device_cache() {
#if ZS_BENCH_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

int64_t device_peak_bytes(const c10::Device& d) {
#if ZS_BENCH_TORCH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(d.index()).allocated_bytes[0].peak;
#else
  (void)d;
  return -1;
#endif
}

void reset_device_peak(const c10::Device& d) {
#if ZS_BENCH_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
#else
  (void)d;
#endif
}

// MemAvailable from /proc/meminfo, bytes (0 when unreadable).
// The share of MemAvailable gpt-offload's 16 bytes per parameter may take (see the top).
constexpr double kHostShare = 0.6;

int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), y.reshape({-1}));
}

// GptImpl::forward, with every block checkpointed when asked.
torch::Tensor gpt_forward(zs_test::GptImpl& m, const torch::Tensor& idx, bool checkpoint) {
  if (!checkpoint) return m.forward(idx);
  torch::Tensor pos = torch::arange(idx.size(1), idx.options());
  torch::Tensor x = m.wte(idx) + m.wpe(pos);
  for (auto& b : m.blocks) x = zs::checkpoint([b](const at::Tensor& t) mutable { return b(t); }, x);
  return torch::nn::functional::linear(m.ln_f(x), m.wte->weight);
}

// This rank's batches for every step, made on the host and copied from pinned memory without
// blocking (the copies overlap the model's construction).
std::vector<std::pair<torch::Tensor, torch::Tensor>> make_batches(const StepArgs& a, const zs_test::GptConfig& cfg,
                                                                  int rank, const c10::Device& device) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (int step = 0; step < a.steps; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(100000 * rank + step);
    torch::Tensor x = torch::randint(cfg.vocab, {a.batch, cfg.seq}, g).pin_memory();
    torch::Tensor y = torch::randint(cfg.vocab, {a.batch, cfg.seq}, g).pin_memory();
    out.emplace_back(x.to(device, /*non_blocking=*/true), y.to(device, /*non_blocking=*/true));
  }
  return out;
}

// Runs `step` a.steps times; the median over the timed steps (slowest rank), device synchronised.
double time_steps(Session& s, const StepArgs& a, const std::function<void(int)>& step) {
  std::vector<double> times;
  const c10::Device device = s.device();
  for (int i = 0; i < a.steps; ++i) {
    torch::cuda::synchronize(device.index());
    s.world()->barrier("bench.step")->wait();
    const auto t0 = Clock::now();
    step(i);
    torch::cuda::synchronize(device.index());
    at::Tensor t = torch::full({1}, std::chrono::duration<double>(Clock::now() - t0).count(), torch::kDouble);
    s.world()->all_reduce(t, ReduceOp::kMax, "bench.time")->wait();
    if (i >= a.warmup) times.push_back(t.item<double>());
  }
  return median(times);
}

void finish(Variant& v, const StepArgs& a, const Model& m, int world, double peak_flops, double step_s,
            const c10::Device& device) {
  v.ran = true;
  v.step_s = step_s;
  v.tokens_per_s = static_cast<double>(a.batch) * m.cfg.seq * world / step_s;
  v.mfu = v.tokens_per_s * m.flops_per_token / world / peak_flops;  // per GPU
  v.peak_device_bytes = device_peak_bytes(device);
}

// (a) plain LibTorch.
Variant run_plain(Session& s, const RunOptions& run, const StepArgs& a, const Model& m, double peak_flops,
                  const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches) {
  Variant v("plain LibTorch");
  const c10::Device device = s.device();
  const OptimizerOptions& oc = run.optimizer;
  try {
    reset_device_peak(device);
    torch::manual_seed(1);
    zs_test::Gpt model(m.cfg);
    model->to(device);
    std::vector<torch::Tensor> params;
    std::unordered_set<const void*> seen;
    for (auto& p : model->parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
    }
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(oc.lr)
                                        .betas({oc.beta1, oc.beta2})
                                        .eps(oc.eps)
                                        .weight_decay(oc.weight_decay));
    const double t = time_steps(s, a, [&](int i) {
      opt.zero_grad();
      torch::Tensor loss;
      {
        std::unique_ptr<AutocastGuard> ac;
        if (a.dtype == "bf16") ac = std::make_unique<AutocastGuard>(c10::DeviceType::CUDA, torch::kBFloat16);
        loss = loss_of(gpt_forward(*model, batches[i].first, a.checkpoint), batches[i].second);
      }
      loss.backward();
      opt.step();
    });
    finish(v, a, m, s.world_size(), peak_flops, t, device);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    v.error = "out of GPU memory";
  }
  release_device_cache();
  return v;
}

std::shared_ptr<ShardedOptimizer> make_zs_optimizer(Session& s, const RunOptions& run, ShardingEngine& engine) {
  if (run.offload.target == OffloadTarget::kDevice) return make_optimizer(run.optimizer);
#if ZS_BENCH_HAVE_OFFLOAD
  return std::shared_ptr<ShardedOptimizer>(make_engine_optimizer(run.optimizer, run.offload, s.rank(), &engine.memory()));
#else
  (void)engine;
  ZS_THROW(UsageError, "offload.optimizer = ", to_string(run.offload.target),
           " but this build has no offload optimizer (zeroshard/offload/offload_optimizer.h is missing)");
#endif
}

// (b) zeroshard.
Variant run_zeroshard(Session& s, const RunOptions& run, const StepArgs& a, const Model& m, double peak_flops,
                      const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches, std::string* report) {
  Variant v("zeroshard");
  const c10::Device device = s.device();
  try {
    reset_device_peak(device);
    torch::manual_seed(1);
    zs_test::Gpt model(m.cfg);
    model->to(device);
    ShardingOptions o = run.sharding;
    o.strategy = parse_strategy(a.strategy);
    if (a.dtype == "bf16" && !o.autocast) o.param_dtype = o.reduce_dtype = torch::kBFloat16;
    ShardingEngine engine(s, model.ptr(), o);
    auto opt = make_zs_optimizer(s, run, engine);
    const double t = time_steps(s, a, [&](int i) {
      at::Tensor loss = engine.forward(
          [&] { return loss_of(gpt_forward(*model, batches[i].first, a.checkpoint), batches[i].second); });
      // offload.overlap_step: the host optimizer steps each unit's shards during backward.
      if (run.offload.overlap_step) engine.step_during_backward(*opt);
      loss.backward();
      engine.step(*opt);
      engine.zero_grad();
    });
    finish(v, a, m, s.world_size(), peak_flops, t, device);
    *report = engine.memory_report();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    v.error = "out of GPU memory";
  }
  release_device_cache();
  return v;
}

std::string json_variant(const Variant& v) {
  std::ostringstream js;
  js << "{\"ran\":" << (v.ran ? "true" : "false");
  if (v.ran) {
    js << ",\"step_s\":" << v.step_s << ",\"tokens_per_s\":" << v.tokens_per_s << ",\"mfu\":" << v.mfu
       << ",\"peak_device_bytes\":" << v.peak_device_bytes;
  } else {
    js << ",\"error\":\"" << v.error << "\"";
  }
  return js.str() + "}";
}

void print_variant(const Variant& v) {
  if (!v.ran) {
    std::printf("  %-15s did not run: %s\n", v.name.c_str(), v.error.c_str());
    return;
  }
  std::printf("  %-15s step %8.3f s   %10.0f tokens/s   MFU %5.1f%%   peak GPU memory %s\n", v.name.c_str(), v.step_s,
              v.tokens_per_s, 100 * v.mfu,
              v.peak_device_bytes < 0 ? "n/a" : (std::to_string(v.peak_device_bytes >> 20) + " MiB").c_str());
}

// The GPT sizes gpt-offload tries, largest first (width, layers, heads).
std::vector<zs_test::GptConfig> offload_ladder(const zs_test::GptConfig& base) {
  struct Shape {
    int64_t dim, layers, heads;
  };
  const Shape shapes[] = {{5120, 40, 40}, {4096, 32, 32}, {2560, 32, 32}, {2048, 24, 16}};
  std::vector<zs_test::GptConfig> out;
  for (const Shape& sh : shapes) {
    zs_test::GptConfig c = base;
    c.dim = sh.dim;
    c.layers = sh.layers;
    c.heads = sh.heads;
    out.push_back(c);
  }
  return out;
}

}  // namespace

int run_gpu_step_bench(Session& s, const RunOptions& run, const StepArgs& a) {
  const c10::Device device = s.device();
  const bool bf16 = a.dtype == "bf16";
  const double peak_tflops = a.peak_tflops > 0 ? a.peak_tflops : (bf16 ? 989.0 : 67.0);
  const char* peak_source = a.peak_tflops > 0 ? "--peak-tflops"
                                               : (bf16 ? "H100/H200 SXM dense bf16, datasheet"
                                                       : "H100/H200 SXM fp32 without tensor cores, datasheet");
  const bool offload = run.offload.target != OffloadTarget::kDevice;
  ZS_REQUIRE(a.preset != "gpt-offload" || offload, UsageError,
             "--preset gpt-offload trains with the optimizer state off the GPU: add --set offload.optimizer=CPU");
  std::vector<zs_test::GptConfig> candidates =
      a.preset == "gpt-offload" ? offload_ladder(a.model) : std::vector<zs_test::GptConfig>{a.model};
  const int64_t host_bytes = host_available_bytes();

  Variant plain("plain LibTorch"), zs("zeroshard");
  Model m;
  std::string report;
  std::vector<std::string> tried;
  for (const zs_test::GptConfig& cfg : candidates) {
    m = describe(cfg);
    const std::string size = std::to_string(m.params / 100000000 / 10.0).substr(0, 4) + "B";
    if (candidates.size() > 1 && host_bytes > 0 && 16.0 * m.params > kHostShare * host_bytes) {
      tried.push_back(size + ": skipped (host state " + std::to_string((16 * m.params) >> 30) + " GiB > 60% of " +
                      std::to_string(host_bytes >> 30) + " GiB available)");
      continue;
    }
    const auto batches = make_batches(a, cfg, s.rank(), device);
    const double peak_flops = peak_tflops * 1e12;
    zs = run_zeroshard(s, run, a, m, peak_flops, batches, &report);
    if (!a.plain) {
      plain = Variant("plain LibTorch", "not run (--plain 0)");
    } else if (!zs.ran) {
      plain = Variant("plain LibTorch", "not run (zeroshard did not fit)");
    } else {
      plain = run_plain(s, run, a, m, peak_flops, batches);
    }
    tried.push_back(size + ": zeroshard " + (zs.ran ? "trained" : zs.error) + ", plain LibTorch " +
                    (plain.ran ? "trained" : plain.error));
    if (zs.ran) break;
  }

  if (s.rank() == 0) {
    const zs_test::GptConfig& c = m.cfg;
    std::printf("bench_step (CUDA): GPT dim=%lld layers=%lld heads=%lld seq=%lld vocab=%lld, %lld params, local batch %lld, "
                "%d rank(s), %s, %s%s, attention %s, optimizer %s\n",
                (long long)c.dim, (long long)c.layers, (long long)c.heads, (long long)c.seq, (long long)c.vocab,
                (long long)m.params, (long long)a.batch, s.world_size(), a.strategy.c_str(), a.dtype.c_str(),
                a.checkpoint ? ", every block checkpointed" : "", c.fused_attention ? "fused (SDPA)" : "naive",
                offload ? to_string(run.offload.target) : "on the GPU");
    for (const std::string& t : tried) std::printf("  tried %s\n", t.c_str());
    std::printf("  model FLOPs/token = 6*N + 12*L*d*T = %.4g (N = %lld block and output-projection parameters)\n",
                m.flops_per_token, (long long)m.flop_params);
    std::printf("  peak used for MFU: %.0f TFLOP/s per GPU (%s)\n", peak_tflops, peak_source);
    print_variant(plain);
    print_variant(zs);
    const bool both = plain.ran && zs.ran;
    if (both) std::printf("  zeroshard / plain tokens/s: %.3f\n", zs.tokens_per_s / plain.tokens_per_s);
    if (!report.empty()) std::printf("%s", report.c_str());
    const int64_t host_peak = peak_resident_bytes();
    if (host_peak >= 0) std::printf("  peak host memory of the process (VmHWM, both variants): %lld MiB\n", (long long)(host_peak >> 20));
    std::ostringstream js;
    js << "{\"bench\":\"step_cuda\",\"preset\":\"" << a.preset << "\",\"ranks\":" << s.world_size()
       << ",\"strategy\":\"" << a.strategy << "\",\"dtype\":\"" << a.dtype
       << "\",\"checkpointing\":" << (a.checkpoint ? "true" : "false")
       << ",\"fused_attention\":" << (c.fused_attention ? "true" : "false") << ",\"offload_optimizer\":\""
       << to_string(run.offload.target) << "\",\"params\":" << m.params
       << ",\"dim\":" << c.dim << ",\"layers\":" << c.layers << ",\"seq\":" << c.seq
       << ",\"tokens_per_step\":" << a.batch * c.seq * s.world_size() << ",\"flops_per_token\":" << m.flops_per_token
       << ",\"peak_tflops\":" << peak_tflops << ",\"plain\":" << json_variant(plain)
       << ",\"zeroshard\":" << json_variant(zs)
       << ",\"tokens_per_s_ratio\":" << (both ? zs.tokens_per_s / plain.tokens_per_s : 0.0)
       << ",\"peak_host_bytes\":" << host_peak << "}";
    std::printf("%s\n", js.str().c_str());
  }
  return zs.ran ? 0 : 1;
}

}  // namespace zs_bench
