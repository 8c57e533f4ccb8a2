#pragma once
// The fused Adam kernels, one per instruction set, each in its own file compiled with that ISA's
// flags. This header is plain C++ (no ATen, no inline functions with external linkage) so that
// nothing compiled with -mavx512f can leak into code that runs on an older CPU.

#include <cstdint>

namespace zeroshard::cpu_adam {

enum class LowPrecision : int { kNone, kBf16, kFp16 };

// Per-element math, fp32, with the roundings of LibTorch 1.13's vectorized CPU kernels for the ops
// torch::optim::Adam/AdamW runs (constants cast from double as torch does); fma(a, b, c) = a * b + c
// rounded once, where ATen's kernels use vec::fmadd or their compiler contracts:
//   AdamW: p = p * decay                         (p.mul_(1 - lr * wd))
//   Adam:  g = fma(p, weight_decay, g)           (grad.add(p, wd), only if l2)
//   m = fma(g, 1 - beta1, m * beta1)             (exp_avg.mul_(beta1).add_(grad, 1 - beta1))
//   v = fma((1 - beta2) * g, g, v * beta2)       (exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2))
//   denom = sqrt(v) / sqrt_bc2 + eps             ((exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps))
//   p = p + (neg_step_size * m) / denom          (p.addcdiv_(exp_avg, denom, -step_size))
//   lp = round_to_nearest_even(p)                (if lp_type != kNone)
// On this order the kernels match torch::optim bit for bit on an AVX2/AVX-512 CPU (tests check
// 1e-6 relative and report the count of differing elements).
struct KernelArgs {
  float* p;
  float* m;
  float* v;
  const float* g;
  uint16_t* lp;  // bf16 or fp16 bits, or null
  LowPrecision lp_type;
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bc2, eps, neg_step_size;
  float weight_decay;  // L2 (Adam), used when l2
  float decay;         // decoupled (AdamW), used when decoupled
  bool l2, decoupled;
};

// Updates elements [begin, end). Safe to call concurrently on disjoint ranges.
using KernelFn = void (*)(const KernelArgs& a, int64_t begin, int64_t end);

void adam_scalar(const KernelArgs& a, int64_t begin, int64_t end);
void adam_avx2(const KernelArgs& a, int64_t begin, int64_t end);
void adam_avx512(const KernelArgs& a, int64_t begin, int64_t end);

}  // namespace zeroshard::cpu_adam
