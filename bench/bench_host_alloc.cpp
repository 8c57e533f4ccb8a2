// SPDX-License-Identifier: Apache-2.0
// bench_host_alloc: what zeroshard's host-memory tracking (memory.track_allocations, on by default)
// costs per CPU allocation, against LibTorch's own CPU allocator in the same run.
//
//   build/bin/bench_host_alloc [--allocs N] [--reps N]
//
// Each of 1 and 2 threads allocates and frees N small tensors (at::empty({16}): the allocator's
// fixed cost, not the memory's); ns = wall time / N, the median of `reps` runs. LibTorch's allocator
// runs first: the tracking allocator, once installed, serves the rest of the process. ratio =
// tracked / untracked. The tracking allocator keeps its live-allocation table striped over 64
// locks: with one global mutex two threads cost 1.9-4.6x the untracked time here (2026-11-26).

#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/core/host_memory.h"

namespace {

struct Args {
  int64_t allocs = 1000000;
  int reps = 5;
};

double ns_per_alloc(int threads, int64_t allocs) {
  auto work = [allocs] {
    for (int64_t i = 0; i < allocs; ++i) {
      at::Tensor t = at::empty({16});
      (void)t;
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9 / static_cast<double>(allocs);
}

double median_of(int reps, int threads, int64_t allocs) {
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) v.push_back(ns_per_alloc(threads, allocs));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  zeroshard::cli::App app("bench_host_alloc",
                          "Cost of zeroshard's host-memory tracking per CPU allocation, against LibTorch's allocator "
                          "in the same run.");
  app.add_int("--allocs", &a.allocs, "allocations per thread and run (default 1000000)", 1);
  app.add_int("--reps", &a.reps, "runs per case, median kept (default 5)", 1);
  try {
    if (!app.parse(argc, argv)) return 0;  // --help
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  double plain[2], tracked[2];
  ns_per_alloc(1, a.allocs);  // warm-up
  for (int t = 1; t <= 2; ++t) plain[t - 1] = median_of(a.reps, t, a.allocs);
  zeroshard::install_host_memory_tracking();
  if (!zeroshard::host_memory_tracking_installed()) {
    std::fprintf(stderr, "bench_host_alloc: LibTorch's CPU allocator cannot be wrapped here\n");
    return 1;
  }
  ns_per_alloc(1, a.allocs);
  for (int t = 1; t <= 2; ++t) tracked[t - 1] = median_of(a.reps, t, a.allocs);
  std::printf("bench_host_alloc: at::empty({16}) + free, ns per allocation (wall / allocations per thread), "
              "median of %d\n%-8s %12s %12s %8s\n", a.reps, "threads", "LibTorch", "tracked", "ratio");
  for (int t = 0; t < 2; ++t) std::printf("%-8d %12.1f %12.1f %8.2f\n", t + 1, plain[t], tracked[t], tracked[t] / plain[t]);
  std::printf("{\"bench\":\"host_alloc\",\"plain_ns\":[%.1f,%.1f],\"tracked_ns\":[%.1f,%.1f]}\n", plain[0], plain[1],
              tracked[0], tracked[1]);
  return 0;
}
