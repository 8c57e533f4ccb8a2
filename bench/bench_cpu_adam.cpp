// SPDX-License-Identifier: Apache-2.0
// The fused CPU optimizers against torch::optim and against the machine's memory bandwidth, on one
// flat fp32 shard, all with the same OpenMP threads:
//   FusedCpuAdam (Adam) vs torch::optim::Adam, and FusedCpuSgd (momentum 0.9) vs torch::optim::SGD,
//   each also with the fused bf16 copy.
// The ceiling for each kernel is a stream kernel over arrays of the same size that does the same
// loads and stores (in place, same 64K-element tiles over the same threads) with no math: what the
// memory system allows for that traffic. "of ceiling" = our params/s / the ceiling's params/s; each
// kernel's runs alternate with its ceiling's, so both see the same load on a shared machine.
// GB/s figures count the bytes the kernel must move per param (the Traffic constants); the
// write-allocate read of the bf16 copy is not counted, but the ceiling kernels pay it too.
// Also printed, for reference: the STREAM triad (a = b + s * c over doubles) that was this bench's
// ceiling before, now on the same threads (see docs/performance.md for why it under-measured).
// Prints a table, the goals, and a final JSON line.
//
//   bench_cpu_adam [--params N (default 100000000)] [--steps S (default 5)]

#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/offload/cpu_adam.h"
#include "zeroshard/offload/cpu_sgd.h"

#ifndef ZS_TORCH_VERSION_STR
#define ZS_TORCH_VERSION_STR "unknown"
#endif

namespace zs = zeroshard;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string first_line(const char* path, const std::string& key = "") {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (key.empty()) return line;
    if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// The last-level cache of CPU 0 as the kernel reports it to this VM/host (sysfs), in bytes.
int64_t llc_bytes() {
  const std::string s = first_line("/sys/devices/system/cpu/cpu0/cache/index3/size");
  if (s == "unknown") return 0;
  int64_t v = std::atoll(s.c_str());
  if (s.back() == 'K') v <<= 10;
  if (s.back() == 'M') v <<= 20;
  return v;
}

// Bytes each kernel must move per parameter.
struct Traffic {
  const char* what;
  int bytes;
};
constexpr Traffic kAdam{"reads g, p, m, v (16 B) + writes p, m, v (12 B)", 28};
constexpr Traffic kAdamBf16{"+ writes the bf16 copy (2 B)", 30};
constexpr Traffic kSgd{"reads g, p, buf (12 B) + writes p, buf (8 B)", 20};
constexpr Traffic kSgdBf16{"+ writes the bf16 copy (2 B)", 22};

// ---- ceiling kernels: the kernels' loads and stores, no math ----
// Vectors of 16 floats through GCC vector extensions; target_clones picks AVX-512, AVX2 or SSE2
// at load time, so the ceiling is not held back by the bench's generic -march.

typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
constexpr int64_t kTile = 1 << 16;  // as the fused kernels (cpu_common.h)

// Vectors move through memcpy only (no vector-typed parameters or returns: their ABI differs
// between the clones).

// Adam's traffic: read g, p, m, v; write p, m, v (and lp). n is a multiple of 16.
__attribute__((target_clones("avx512f", "avx2", "default"))) void adam_traffic_tile(
    float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g,
    uint16_t* __restrict lp, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) {
    v16f gv, pv, mv, vv;
    std::memcpy(&gv, g + i, sizeof gv);
    std::memcpy(&pv, p + i, sizeof pv);
    std::memcpy(&mv, m + i, sizeof mv);
    std::memcpy(&vv, v + i, sizeof vv);
    pv += gv;
    mv += gv;
    vv += gv;
    std::memcpy(p + i, &pv, sizeof pv);
    std::memcpy(m + i, &mv, sizeof mv);
    std::memcpy(v + i, &vv, sizeof vv);
    if (lp != nullptr) {  // the top half of each float (truncation: the traffic, not the rounding)
      v16u bits;
      std::memcpy(&bits, &pv, sizeof bits);
      const v16h h = __builtin_convertvector(bits >> 16, v16h);
      std::memcpy(lp + i, &h, sizeof h);
    }
  }
}

// SGD's traffic: read g, p, buf; write p, buf (and lp).
__attribute__((target_clones("avx512f", "avx2", "default"))) void sgd_traffic_tile(
    float* __restrict p, float* __restrict buf, const float* __restrict g, uint16_t* __restrict lp,
    int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) {
    v16f gv, pv, bv;
    std::memcpy(&gv, g + i, sizeof gv);
    std::memcpy(&pv, p + i, sizeof pv);
    std::memcpy(&bv, buf + i, sizeof bv);
    bv += gv;
    pv += bv;
    std::memcpy(buf + i, &bv, sizeof bv);
    std::memcpy(p + i, &pv, sizeof pv);
    if (lp != nullptr) {  // the top half of each float (truncation: the traffic, not the rounding)
      v16u bits;
      std::memcpy(&bits, &pv, sizeof bits);
      const v16h h = __builtin_convertvector(bits >> 16, v16h);
      std::memcpy(lp + i, &h, sizeof h);
    }
  }
}

// Calls fn(begin, end) over 64K tiles of [0, n) on the OpenMP threads, as the fused kernels do.
template <class Fn>
void tiles(int64_t n, Fn&& fn) {
  const int64_t count = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < count; ++t) fn(t * kTile, std::min(n, (t + 1) * kTile));
}

// Best seconds per call of fn over `reps` calls, after one warm-up call.
template <class Fn>
double best_of(int reps, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    fn();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

// Best seconds per call of `kernel` and of `ceiling` over `reps` calls each, alternating (after a
// warm-up of each), so both see the same conditions when the machine's load varies.
template <class K, class C>
std::pair<double, double> best_alternating(int reps, K&& kernel, C&& ceiling) {
  kernel();
  ceiling();
  double best_k = 1e30, best_c = 1e30;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_s();
    kernel();
    best_k = std::min(best_k, now_s() - t0);
    t0 = now_s();
    ceiling();
    best_c = std::min(best_c, now_s() - t0);
  }
  return {best_k, best_c};
}

// Arrays for the ceiling kernels: n params (n a multiple of 16), first touched in parallel by the
// same threads, as the optimizer state is.
struct Scratch {
  explicit Scratch(int64_t n)
      : n(n), p(torch::zeros({n})), m(torch::zeros({n})), v(torch::zeros({n})), g(torch::zeros({n})),
        lp(torch::zeros({n}, torch::kBFloat16)) {}
  void adam(bool copy) {
    float *pp = p.data_ptr<float>(), *pm = m.data_ptr<float>(), *pv = v.data_ptr<float>();
    const float* pg = g.data_ptr<float>();
    uint16_t* plp = copy ? static_cast<uint16_t*>(lp.data_ptr()) : nullptr;
    tiles(n, [&](int64_t b, int64_t e) { adam_traffic_tile(pp, pm, pv, pg, plp, b, e); });
  }
  void sgd(bool copy) {
    float *pp = p.data_ptr<float>(), *pb = m.data_ptr<float>();
    const float* pg = g.data_ptr<float>();
    uint16_t* plp = copy ? static_cast<uint16_t*>(lp.data_ptr()) : nullptr;
    tiles(n, [&](int64_t b, int64_t e) { sgd_traffic_tile(pp, pb, pg, plp, b, e); });
  }
  int64_t n;
  torch::Tensor p, m, v, g, lp;
};

// The previous ceiling, kept for reference: STREAM triad a = b + s * c over 3 x 256 MiB of doubles,
// same threads; returns {GB/s counted as STREAM does (24 B/element: 2 reads + 1 write), GB/s
// including the write-allocate read of a (32 B/element)}.
std::pair<double, double> stream_triad() {
  const int64_t n = int64_t{1} << 25;
  torch::Tensor a = torch::zeros({n}, torch::kDouble), b = torch::ones({n}, torch::kDouble),
                c = torch::full({n}, 2.0, torch::kDouble);
  double* __restrict pa = a.data_ptr<double>();
  const double* __restrict pb = b.data_ptr<double>();
  const double* __restrict pc = c.data_ptr<double>();
  const double t = best_of(5, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0 * pc[i];
  });
  return {24.0 * n / t / 1e9, 32.0 * n / t / 1e9};
}

struct Row {
  const char* name;
  double seconds;
  double ceiling;  // params/s of the ceiling kernel for this traffic
  int bytes;       // per param, counted
};

}  // namespace

int main(int argc, char** argv) try {
  int64_t n = 100000000;
  int steps = 5;
  zs::cli::App app("bench_cpu_adam",
                   "The fused CPU optimizers (Adam, SGD with momentum, each also with the bf16 copy) against "
                   "torch::optim and against stream kernels with the same memory traffic, on one flat fp32 shard, "
                   "all on the same OpenMP threads. Final line: JSON.");
  app.add_int("--params", &n, "elements of the shard (default 100000000)", 16);
  app.add_int("--steps", &steps, "steps per kernel, median kept (default 5)", 1);
  if (!app.parse(argc, argv)) return 0;
  const int threads = zs::cpu_optimizer_threads();
  at::set_num_threads(threads);  // torch's intra-op pool = our OpenMP threads
  omp_set_num_threads(threads);  // the ceiling kernels' too
  torch::NoGradGuard no_grad;

  const auto [triad_gbps, triad_rfo_gbps] = stream_triad();

  torch::manual_seed(0);
  const torch::Tensor p0 = torch::randn({n});
  const torch::Tensor g = torch::randn({n});
  std::vector<torch::Tensor> lp = {torch::empty({n}, torch::kBFloat16)};
  Scratch scratch(n - n % 16);
  std::vector<Row> rows;
  // Our kernel and its ceiling, alternating; adds the row.
  auto measure = [&](const char* name, const Traffic& traffic, const std::function<void()>& kernel,
                     const std::function<void()>& ceiling) {
    const auto [t, t_ceiling] = best_alternating(steps, kernel, ceiling);
    rows.push_back({name, t, scratch.n / t_ceiling, traffic.bytes});
  };

  // Adam: torch, then ours (torch's moments freed first).
  double t_torch_adam;
  {
    torch::Tensor p = p0.clone();
    p.mutable_grad() = g;
    torch::optim::Adam opt({p}, torch::optim::AdamOptions(1e-3));
    t_torch_adam = best_of(steps, [&] { opt.step(); });
  }
  zs::SimdPath path;
  {
    zs::CpuAdamOptions o;
    o.adamw = false;
    zs::FusedCpuAdam ours(o);
    path = ours.path();
    std::vector<zs::ParamShard> shards = {{p0.clone(), g, "bench"}};
    measure("FusedCpuAdam", kAdam, [&] { ours.step(shards); }, [&] { scratch.adam(false); });
    measure("FusedCpuAdam + bf16 copy", kAdamBf16, [&] { ours.step_with_copy(shards, lp); },
            [&] { scratch.adam(true); });
  }
  rows.insert(rows.begin(), {"torch::optim::Adam", t_torch_adam, rows[0].ceiling, kAdam.bytes});
  // SGD with momentum.
  double t_torch_sgd;
  {
    torch::Tensor p = p0.clone();
    p.mutable_grad() = g;
    torch::optim::SGD opt({p}, torch::optim::SGDOptions(1e-2).momentum(0.9));
    t_torch_sgd = best_of(steps, [&] { opt.step(); });
  }
  {
    zs::SgdOptions o;
    o.lr = 1e-2;
    o.momentum = 0.9;
    zs::FusedCpuSgd ours(o);
    std::vector<zs::ParamShard> shards = {{p0.clone(), g, "bench"}};
    measure("FusedCpuSgd", kSgd, [&] { ours.step(shards); }, [&] { scratch.sgd(false); });
    measure("FusedCpuSgd + bf16 copy", kSgdBf16, [&] { ours.step_with_copy(shards, lp); },
            [&] { scratch.sgd(true); });
  }
  rows.insert(rows.begin() + 3, {"torch::optim::SGD", t_torch_sgd, rows[3].ceiling, kSgd.bytes});

  // rows: 0 torch Adam, 1 FusedCpuAdam, 2 + bf16, 3 torch SGD, 4 FusedCpuSgd, 5 + bf16.
  const auto rate = [&](size_t row) { return n / rows[row].seconds; };
  const auto fraction = [&](size_t row) { return rate(row) / rows[row].ceiling; };
  const int64_t llc = llc_bytes();
  std::printf("CPU:        %s (%s; kernels: %s)\n", first_line("/proc/cpuinfo", "model name").c_str(),
              zs::cpu_simd_flags().c_str(), zs::to_string(path));
  std::printf("threads:    %d OpenMP threads for ours and the ceilings; at::get_num_threads() = %d for torch\n",
              threads, at::get_num_threads());
  std::printf("LibTorch:   %s\n", ZS_TORCH_VERSION_STR);
  std::printf("shard:      %lld fp32 params (%.1f MB per array); Adam touches 4 arrays = %.0f MB, %.1fx the "
              "LLC (%lld MiB)%s\n",
              static_cast<long long>(n), n * 4 / 1e6, n * 16 / 1e6, llc ? n * 16.0 / llc : 0.0,
              static_cast<long long>(llc >> 20),
              llc && n * 16 < 4 * llc ? "  WARNING: < 4x LLC, the ceilings measure caches, not DRAM" : "");
  std::printf("timing:     best of %d steps after a warm-up; each fused kernel alternates with its ceiling\n",
              steps);
  std::printf("bytes/param counted: Adam %s = %d B; %s = %d B.\n", kAdam.what, kAdam.bytes, kAdamBf16.what,
              kAdamBf16.bytes);
  std::printf("                     SGD %s = %d B; %s = %d B.\n", kSgd.what, kSgd.bytes, kSgdBf16.what,
              kSgdBf16.bytes);
  std::printf("ceilings:   same loads/stores, no math: Adam %.3g params/s (%.1f GB/s), + bf16 %.3g; SGD %.3g "
              "(%.1f GB/s), + bf16 %.3g\n",
              rows[1].ceiling, rows[1].ceiling * kAdam.bytes / 1e9, rows[2].ceiling, rows[4].ceiling,
              rows[4].ceiling * kSgd.bytes / 1e9, rows[5].ceiling);
  std::printf("old ceiling (reference): STREAM triad, same threads, %.1f GB/s counted at 24 B/element (%.1f GB/s "
              "with the write-allocate read)\n\n",
              triad_gbps, triad_rfo_gbps);
  std::printf("%-26s %10s %11s %9s %9s %11s\n", "", "ms/step", "params/s", "GB/s", "speedup", "of ceiling");
  for (size_t i = 0; i < rows.size(); ++i) {
    const double ref = n / (i < 3 ? t_torch_adam : t_torch_sgd);
    std::printf("%-26s %10.2f %11.3g %9.1f %8.2fx %10.0f%%\n", rows[i].name, rows[i].seconds * 1e3, rate(i),
                rate(i) * rows[i].bytes / 1e9, rate(i) / ref, 100 * fraction(i));
  }
  const double adam_speedup = rate(1) / rate(0), sgd_speedup = rate(4) / rate(3);
  const double adam_of_triad = rate(1) * kAdam.bytes / 1e9 / triad_rfo_gbps;
  std::printf("\nraw bandwidth: FusedCpuAdam moves %.1f GB/s = %.0f%% of the STREAM triad's %.1f GB/s counted with "
              "its write-allocate read (%.0f%% of %.1f GB/s without)\n",
              rate(1) * kAdam.bytes / 1e9, 100 * adam_of_triad, triad_rfo_gbps,
              100 * rate(1) * kAdam.bytes / 1e9 / triad_gbps, triad_gbps);
  std::printf("goals:      FusedCpuAdam >= 6x torch::optim::Adam: %.2fx %s; >= 60%% of its ceiling: %.0f%% %s\n",
              adam_speedup, adam_speedup >= 6 ? "MET" : "NOT MET", 100 * fraction(1),
              fraction(1) >= 0.6 ? "MET" : "NOT MET");
  std::printf("{\"bench\": \"cpu_adam\", \"params\": %lld, \"threads\": %d, \"simd\": \"%s\", "
              "\"torch_version\": \"%s\", \"ceiling_adam_params_per_s\": %.4g, \"ceiling_adam_gbps\": %.3f, "
              "\"ceiling_sgd_params_per_s\": %.4g, \"triad_gbps_24B\": %.3f, \"triad_gbps_32B\": %.3f, "
              "\"torch_adam_params_per_s\": %.4g, \"fused_adam_params_per_s\": %.4g, "
              "\"fused_adam_bf16_params_per_s\": %.4g, \"adam_speedup\": %.3f, \"adam_fraction_of_ceiling\": %.3f, "
              "\"adam_bf16_fraction_of_ceiling\": %.3f, \"torch_sgd_params_per_s\": %.4g, "
              "\"fused_sgd_params_per_s\": %.4g, \"sgd_speedup\": %.3f, \"sgd_fraction_of_ceiling\": %.3f, "
              "\"adam_fraction_of_triad_32B\": %.3f}\n",
              static_cast<long long>(n), threads, zs::to_string(path), ZS_TORCH_VERSION_STR, rows[1].ceiling,
              rows[1].ceiling * kAdam.bytes / 1e9, rows[4].ceiling, triad_gbps, triad_rfo_gbps, rate(0), rate(1),
              rate(2), adam_speedup, fraction(1), fraction(2), rate(3), rate(4), sgd_speedup, fraction(4),
              adam_of_triad);
  return 0;
} catch (const zs::UsageError& e) {
  std::fprintf(stderr, "bench_cpu_adam: usage error: %s\n", e.message().c_str());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cpu_adam: error: %s\n", e.what());
  return 1;
}
