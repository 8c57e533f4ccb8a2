// Fused CPU Adam vs torch::optim::Adam on one flat fp32 shard, same thread count, one run; and the
// machine's memory bandwidth (STREAM triad) turned into a params/s ceiling for the bytes the fused
// kernel must move per parameter (read g, p, m, v: 16 B; write p, m, v: 12 B; + 2 B with the bf16
// copy). Prints a table and a final JSON line.
//
//   bench_cpu_adam [--params N (default 100000000)] [--steps S (default 5)]

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "zeroshard/offload/cpu_adam.h"

#ifndef ZS_TORCH_VERSION_STR
#define ZS_TORCH_VERSION_STR "unknown"
#endif

namespace zs = zeroshard;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Best of 5 STREAM triads (after one warm-up) a = b + s * c over arrays of `n` doubles; bytes/s counting 24 B/element
// (STREAM's convention: 2 reads + 1 write).
double triad_bandwidth(int64_t n) {
  std::vector<double> a(n), b(n, 1.0), c(n, 2.0);
  const double s = 3.0;
  at::parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {  // first touch by the workers
    for (int64_t i = lo; i < hi; ++i) a[i] = 0;
  });
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const double t0 = now_s();
    at::parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
#pragma GCC ivdep
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    if (rep > 0) best = std::min(best, now_s() - t0);
  }
  if (a[n / 2] != 7.0) std::fprintf(stderr, "triad check failed\n");
  return 24.0 * static_cast<double>(n) / best;
}

// Median seconds per call of fn over `steps` calls, after one warm-up call.
template <class Fn>
double time_steps(int steps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now_s();
    fn();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  int64_t n = 100000000;
  int steps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--params") && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--params N] [--steps S]\n", argv[0]);
      return 2;
    }
  }
  if (n <= 0 || steps <= 0) {
    std::fprintf(stderr, "bench_cpu_adam: --params and --steps must be > 0\n");
    return 2;
  }
  const int threads = zs::cpu_adam_threads();
  at::set_num_threads(threads);  // torch's intra-op pool = our OpenMP threads
  torch::NoGradGuard no_grad;

  // Bandwidth ceiling: arrays of 32M doubles (256 MiB each), far beyond any LLC.
  const double bw = triad_bandwidth(int64_t{1} << 25);
  const double ceiling = bw / 28.0, ceiling_bf16 = bw / 30.0;

  // torch::optim::Adam.
  torch::manual_seed(0);
  torch::Tensor p_ref = torch::randn({n});
  torch::Tensor g = torch::randn({n});
  torch::Tensor p_ours = p_ref.clone();
  p_ref.mutable_grad() = g;
  torch::optim::Adam torch_adam({p_ref}, torch::optim::AdamOptions(1e-3));
  const double t_torch = time_steps(steps, [&] { torch_adam.step(); });
  torch_adam.state().clear();  // free torch's moments before ours are allocated
  p_ref = torch::Tensor();

  // Ours, without and with the fused bf16 copy.
  zs::CpuAdamOptions o;
  o.adamw = false;
  zs::FusedCpuAdam ours(o);
  std::vector<zs::ParamShard> shards = {{p_ours, g, "bench"}};
  const double t_ours = time_steps(steps, [&] { ours.step(shards); });
  std::vector<torch::Tensor> lp = {torch::empty({n}, torch::kBFloat16)};
  const double t_ours_bf16 = time_steps(steps, [&] { ours.step_with_copy(shards, lp); });

  const double r_torch = n / t_torch, r_ours = n / t_ours, r_bf16 = n / t_ours_bf16;
  std::printf("CPU:        %s (%s; kernel %s)\n", cpu_model().c_str(), zs::cpu_simd_flags().c_str(),
              zs::to_string(ours.path()));
  std::printf("threads:    %d (OpenMP for ours, at::get_num_threads() = %d for torch)\n", threads,
              at::get_num_threads());
  std::printf("LibTorch:   %s\n", ZS_TORCH_VERSION_STR);
  std::printf("shard:      %lld fp32 params (%.1f MB per tensor), median of %d steps\n",
              static_cast<long long>(n), n * 4 / 1e6, steps);
  std::printf("triad:      %.2f GB/s -> ceiling %.3g params/s (28 B/param), %.3g (30 B, + bf16)\n",
              bw / 1e9, ceiling, ceiling_bf16);
  std::printf("%-26s %12s %12s %10s %12s\n", "", "ms/step", "params/s", "speedup", "of ceiling");
  std::printf("%-26s %12.2f %12.3g %10s %11.0f%%\n", "torch::optim::Adam", t_torch * 1e3, r_torch,
              "1.00x", 100 * r_torch / ceiling);
  std::printf("%-26s %12.2f %12.3g %9.2fx %11.0f%%\n", "FusedCpuAdam", t_ours * 1e3, r_ours,
              r_ours / r_torch, 100 * r_ours / ceiling);
  std::printf("%-26s %12.2f %12.3g %9.2fx %11.0f%%\n", "FusedCpuAdam + bf16 copy", t_ours_bf16 * 1e3,
              r_bf16, r_bf16 / r_torch, 100 * r_bf16 / ceiling_bf16);
  std::printf("{\"bench\": \"cpu_adam\", \"params\": %lld, \"threads\": %d, \"simd\": \"%s\", "
              "\"torch_version\": \"%s\", \"triad_gbps\": %.3f, \"torch_params_per_s\": %.4g, "
              "\"fused_params_per_s\": %.4g, \"fused_bf16_params_per_s\": %.4g, \"speedup\": %.3f, "
              "\"speedup_bf16\": %.3f, \"fraction_of_ceiling\": %.3f, "
              "\"fraction_of_ceiling_bf16\": %.3f}\n",
              static_cast<long long>(n), threads, zs::to_string(ours.path()), ZS_TORCH_VERSION_STR,
              bw / 1e9, r_torch, r_ours, r_bf16, r_ours / r_torch, r_bf16 / r_torch, r_ours / ceiling,
              r_bf16 / ceiling_bf16);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cpu_adam: error: %s\n", e.what());
  return 1;
}
