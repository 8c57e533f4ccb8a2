#pragma once
// Fused CPU Adam/AdamW over flat fp32 shards kept in host memory (ZeRO-Offload's optimizer step).
//
// One pass over memory per shard: reads g, p, m, v, writes p, m, v and, when asked, a bf16 or
// fp16 copy of the new p (round-to-nearest-even, equal to p.to(dtype)) for the device. The math
// is torch::optim::Adam / AdamW (LibTorch 1.13) element by element in fp32, with the step
// constants in double as torch computes them, rounding where ATen's vectorized kernels round: on
// an AVX2/AVX-512 CPU results equal torch::optim's bit for bit (tests hold 1e-6 relative and
// report the differing elements; with another LibTorch build, ~1 ulp differences are possible).
//
// Contract of step() is ShardedOptimizer's: the same shard list, in the same order, every step;
// state per position; a throwing step() changes nothing. Shards must be CPU tensors.
// Work is spread over OpenMP threads (omp_get_max_threads(), which at::set_num_threads sets too)
// when the library was built with OpenMP, else it runs on the calling thread.
// Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/sharding/optimizer.h"

namespace zeroshard {

// Instruction sets the kernel is built for. kAuto: the best this CPU supports.
enum class SimdPath { kAuto, kScalar, kAvx2, kAvx512 };

// "auto", "scalar", "avx2" or "avx512".
const char* to_string(SimdPath path);

// The best path this CPU supports: kAvx512 needs avx512f/bw/vl/dq, kAvx2 needs avx2, fma and f16c.
// The environment variable ZS_CPU_SIMD_MAX=scalar|avx2|avx512 caps the answer (to test the
// fallbacks on a newer CPU); any other value is a UsageError.
SimdPath detect_simd();
// Whether `path` can run here (kAuto and kScalar always can); honours ZS_CPU_SIMD_MAX.
bool simd_supported(SimdPath path);
// The relevant CPU flags this CPU has, e.g. "avx2 fma f16c avx512f avx512bw avx512vl avx512dq".
std::string cpu_simd_flags();
// Threads the fused kernel uses (1 without OpenMP).
int cpu_adam_threads();

struct CpuAdamOptions : AdamOptions {
  bool adamw = true;  // true: decoupled weight decay (AdamW); false: L2 added to the grad (Adam)
};

class FusedCpuAdam final : public ShardedOptimizer {
 public:
  // Throws UsageError naming the field for out-of-range options (the ranges of make_adam) and
  // for amsgrad = true, which the fused kernel does not implement.
  explicit FusedCpuAdam(const CpuAdamOptions& options);
  ~FusedCpuAdam() override;

  // Forces a kernel; kAuto (the default) picks detect_simd(). Throws UsageError naming the path
  // and this CPU's flags if the CPU cannot run it.
  void set_path(SimdPath path);
  // The kernel that step() runs (never kAuto).
  SimdPath path() const { return path_; }

  void step(const std::vector<ParamShard>& shards) override;
  // step(), and writes each shard's new param into lp_out[i] converted to its dtype, fused into the
  // same pass. lp_out is empty (no copies) or has one entry per shard: undefined (no copy), or a
  // contiguous CPU bf16/fp16 tensor with the shard's numel. A shard without a grad is not updated,
  // but its copy is still written, so after the call every lp_out[i] equals param.to(dtype).
  void step_with_copy(const std::vector<ParamShard>& shards, const std::vector<at::Tensor>& lp_out);

  int64_t state_bytes() const override;
  // e.g. "FusedCpuAdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, simd=avx512)"
  std::string describe() const override;
  int64_t steps() const override { return steps_; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<ShardOptimizerState> export_state() const override;
  void import_state(std::vector<ShardOptimizerState> state, int64_t steps) override;

 private:
  struct Slot;
  void check_shards(const std::vector<ParamShard>& shards, const std::vector<at::Tensor>& lp_out);

  CpuAdamOptions o_;
  SimdPath path_;
  std::vector<Slot> slots_;
  bool layout_recorded_ = false;
  int64_t steps_ = 0;
  std::unique_ptr<std::vector<ShardOptimizerState>> pending_;  // import_state, applied at step()
};

}  // namespace zeroshard
