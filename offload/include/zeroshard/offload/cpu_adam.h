// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fused CPU Adam/AdamW over flat fp32 shards kept in host memory (ZeRO-Offload's optimizer step).
//
// One pass over memory per shard: reads g, p, m, v, writes p, m, v and, when asked, a bf16 or
// fp16 copy of the new p (see FusedCpuOptimizer, cpu_optimizer.h, for the shared contract). The
// math is torch::optim::Adam / AdamW (LibTorch 1.13) element by element in fp32, with the step
// constants in double as torch computes them, rounding where ATen's vectorized kernels round: on
// an AVX2/AVX-512 CPU results equal torch::optim's bit for bit (tests hold 1e-6 relative and
// report the differing elements; with another LibTorch build, ~1 ulp differences are possible).
// Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/offload/cpu_optimizer.h"
#include "zeroshard/offload/cpu_simd.h"

namespace zeroshard {

// Threads the fused kernels use; the same as cpu_optimizer_threads() (the older name).
inline int cpu_adam_threads() { return cpu_optimizer_threads(); }

struct CpuAdamOptions : AdamOptions {
  bool adamw = true;  // true: decoupled weight decay (AdamW); false: L2 added to the grad (Adam)
};

// The CpuAdamOptions of OptimizerOptions of type ADAM or ADAMW (UsageError otherwise).
CpuAdamOptions cpu_adam_options(const OptimizerOptions& options);

class FusedCpuAdam final : public FusedCpuOptimizer {
 public:
  // Throws UsageError naming the field for out-of-range options (the ranges of make_adam) and
  // for amsgrad = true, which the fused kernel does not implement.
  explicit FusedCpuAdam(const CpuAdamOptions& options);
  ~FusedCpuAdam() override;

  int64_t state_bytes() const override;
  // e.g. "FusedCpuAdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, simd=avx512)"
  std::string describe() const override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  struct Slot;
  void update(size_t index, const ParamShard& shard, const at::Tensor& lp) override;
  ShardOptimizerState get_state(size_t index) const override;
  void set_state(size_t index, const ShardOptimizerState& state) override;

  CpuAdamOptions o_;
  std::vector<Slot> slots_;
};

}  // namespace zeroshard
