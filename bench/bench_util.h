// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small pieces the CPU training benchmarks share (bench_step, bench_torchscript).

#include <ATen/ops/full.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"

namespace zs_bench {

// The middle element (the upper one of the two middles for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Cross-entropy of logits [..., V] against integer targets [...].
inline at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

// Seconds `step` took on the slowest rank (the ranks start together after a barrier).
inline double time_step(zeroshard::Communicator& world, const std::function<void()>& step) {
  world.barrier("bench.step")->wait();
  const auto t0 = std::chrono::steady_clock::now();
  step();
  at::Tensor t = at::full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                          at::TensorOptions().dtype(at::kDouble));
  world.all_reduce(t, zeroshard::ReduceOp::kMax, "bench.time")->wait();
  return t.item<double>();
}

// The process's peak resident memory as the kernel counts it (VmHWM), -1 where unreadable.
inline int64_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:  123 kB"
  }
  return -1;
}

}  // namespace zs_bench
