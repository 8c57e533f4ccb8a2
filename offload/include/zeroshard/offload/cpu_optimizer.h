// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fused CPU optimizers over flat fp32 shards kept in host memory (ZeRO-Offload's optimizer step):
// what FusedCpuAdam and FusedCpuSgd share, and the factory from OptimizerOptions.
//
// One pass over memory per shard: each kernel reads the grad, the param and its state once and
// writes the param and state once and, when asked, a bf16 or fp16 copy of the new param for the
// device (round-to-nearest-even, equal to param.to(dtype)), fused into the same pass. The math is
// torch::optim's element by element in fp32 (see each optimizer's header).
//
// Contract of step() is ShardedOptimizer's: the same shard list, in the same order, every step;
// state per position; a step() that throws on a bad argument changes nothing. Shards must be
// contiguous fp32 CPU tensors. Work is split into 64K-element tiles spread over
// cpu_optimizer_threads() OpenMP threads. Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/offload/cpu_simd.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard {

class FusedCpuOptimizer : public ShardedOptimizer {
 public:
  // Forces a kernel; kAuto (the default) picks detect_simd(). Throws UsageError naming the path
  // and this CPU's flags if the CPU cannot run it.
  void set_path(SimdPath path);
  // The kernel that step() runs (never kAuto).
  SimdPath path() const { return path_; }

  void step(const std::vector<ParamShard>& shards) final { step_with_copy(shards, {}); }
  // step(), and writes each shard's new param into lp_out[i] converted to its dtype, fused into the
  // same pass. lp_out is empty (no copies) or has one entry per shard: undefined (no copy), or a
  // contiguous CPU bf16/fp16 tensor with the shard's numel. A shard without a grad is not updated,
  // but its copy is still written, so after the call every lp_out[i] equals param.to(dtype).
  void step_with_copy(const std::vector<ParamShard>& shards, const std::vector<at::Tensor>& lp_out);

  int64_t steps() const final { return steps_; }
  std::vector<ShardOptimizerState> export_state() const final;
  void import_state(std::vector<ShardOptimizerState> state, int64_t steps) final;

 protected:
  // `name` prefixes error messages ("FusedCpuAdam step: ...").
  FusedCpuOptimizer(std::string name, double lr);

  // Updates shard `index` (which has a grad; inputs already checked) in place and writes `lp`
  // (undefined: no copy) in the same pass.
  virtual void update(size_t index, const ParamShard& shard, const at::Tensor& lp) = 0;
  // State of position `index` (tensors may alias the live state), and its replacement.
  virtual ShardOptimizerState get_state(size_t index) const = 0;
  virtual void set_state(size_t index, const ShardOptimizerState& state) = 0;

 private:
  void check_inputs(const std::vector<ParamShard>& shards, const std::vector<at::Tensor>& lp_out);

  std::string name_;
  SimdPath path_;
  std::vector<int64_t> layout_;  // numel per position, recorded at the first step
  bool layout_recorded_ = false;
  int64_t steps_ = 0;
  std::unique_ptr<std::vector<ShardOptimizerState>> pending_;  // import_state, applied at step
};

// The fused CPU optimizer for `options`: FusedCpuAdam with adamw = false (ADAM) or true (ADAMW),
// or FusedCpuSgd (SGD, dampening 0), with the best SIMD path. `options` is checked exactly as
// make_optimizer() checks it (UsageError naming OptimizerOptions.<field>), so the fused and the
// plain optimizer accept the same options.
std::unique_ptr<FusedCpuOptimizer> make_cpu_optimizer(const OptimizerOptions& options);

}  // namespace zeroshard
