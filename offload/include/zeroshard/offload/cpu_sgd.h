// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fused CPU SGD (momentum, dampening, Nesterov, L2 weight decay) over flat fp32 shards kept in
// host memory: the SGD counterpart of FusedCpuAdam (see FusedCpuOptimizer, cpu_optimizer.h, for
// the shared contract: one pass per shard, optional fused bf16/fp16 copy, SIMD path, threads).
//
// One pass reads g, p (and the momentum buffer b) and writes p (and b). The math is
// torch::optim::SGD (LibTorch 1.13) element by element in fp32, rounding where ATen's vectorized
// kernels round:
//   d = g + weight_decay * p                       (only if weight_decay != 0)
//   momentum != 0:  b = d at a shard's first update, else b = b * momentum + (1 - dampening) * d;
//                   d = nesterov ? d + momentum * b : b
//   p = p - lr * d
// On an AVX2/AVX-512 CPU results equal torch::optim::SGD's bit for bit (tests hold 1e-6 relative
// and report the differing elements). Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/offload/cpu_optimizer.h"

namespace zeroshard {

class FusedCpuSgd final : public FusedCpuOptimizer {
 public:
  // Throws UsageError naming the field for out-of-range options (the ranges of make_sgd,
  // including nesterov needing momentum > 0 and dampening = 0).
  explicit FusedCpuSgd(const SgdOptions& options);
  ~FusedCpuSgd() override;

  // Bytes of momentum buffers (none when momentum = 0).
  int64_t state_bytes() const override;
  // e.g. "FusedCpuSgd(lr=0.01, momentum=0.9, dampening=0, weight_decay=0, nesterov=false, simd=avx512)"
  std::string describe() const override;
  std::vector<std::string> state_names() const override {
    if (o_.momentum == 0) return {};
    return {"momentum_buffer"};
  }

 private:
  void update(size_t index, const ParamShard& shard, const at::Tensor& lp) override;
  ShardOptimizerState get_state(size_t index) const override;
  void set_state(size_t index, const ShardOptimizerState& state) override;

  SgdOptions o_;
  std::vector<at::Tensor> momentum_;  // per position; created at the position's first update
};

}  // namespace zeroshard
