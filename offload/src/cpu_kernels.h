// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fused optimizer kernels (Adam/AdamW, SGD), one set per instruction set, each set in its own
// file compiled with that ISA's flags. This header is plain C++ (no ATen, no inline functions with
// external linkage) so that nothing compiled with -mavx512f can leak into code that runs on an
// older CPU.
//
// Per-element math is fp32 with the roundings of LibTorch 1.13's vectorized CPU kernels for the ops
// torch::optim runs (constants cast from double as torch does); fma(a, b, c) = a * b + c rounded
// once, where ATen's kernels use vec::fmadd (Tensor::add(other, alpha) is fmadd(other, alpha, self))
// or their compiler contracts. On this order the kernels match torch::optim bit for bit on an
// AVX2/AVX-512 CPU (tests check 1e-6 relative and report the count of differing elements).
// Every kernel updates elements [begin, end) and is safe to call concurrently on disjoint ranges.

#include <cstdint>

namespace zeroshard::cpu_optim {

// The optional low-precision copy of the new param: bf16 or fp16 bits, round to nearest even.
enum class LowPrecision : int { kNone, kBf16, kFp16 };

// torch::optim::Adam / AdamW:
//   AdamW: p = p * decay                         (p.mul_(1 - lr * wd))
//   Adam:  g = fma(p, weight_decay, g)           (grad.add(p, wd), only if l2)
//   m = fma(g, 1 - beta1, m * beta1)             (exp_avg.mul_(beta1).add_(grad, 1 - beta1))
//   v = fma((1 - beta2) * g, g, v * beta2)       (exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2))
//   denom = sqrt(v) / sqrt_bc2 + eps             ((exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps))
//   p = p + (neg_step_size * m) / denom          (p.addcdiv_(exp_avg, denom, -step_size))
//   lp = round_to_nearest_even(p)                (if lp_type != kNone)
// The new p, m, v go to p_out, m_out, v_out (the same pointers for an update in place; distinct
// arrays leave the inputs as they were).
struct AdamArgs {
  const float* p;
  const float* m;
  const float* v;
  float* p_out;
  float* m_out;
  float* v_out;
  const float* g;
  uint16_t* lp;  // bf16 or fp16 bits, or null
  LowPrecision lp_type;
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bc2, eps, neg_step_size;
  float weight_decay;  // L2 (Adam), used when l2
  float decay;         // decoupled (AdamW), used when decoupled
  bool l2, decoupled;
};

// torch::optim::SGD:
//   d = fma(p, weight_decay, g)                  (d_p = grad.add(p, wd), only if l2)
//   with momentum (buf != null):
//     b = first ? d : fma(d, one_minus_dampening, b * momentum)
//                                                (buf = clone(d_p) / buf.mul_(mom).add_(d_p, 1 - damp))
//     d = nesterov ? fma(b, momentum, d) : b     (d_p.add(buf, mom) / buf)
//   p = fma(d, neg_lr, p)                        (p.add_(d_p, -1 * lr))
//   lp = round_to_nearest_even(p)                (if lp_type != kNone)
// The new p and buffer go to p_out and buf_out (the same pointers for an update in place).
struct SgdArgs {
  const float* p;
  const float* buf;  // momentum buffer, or null for momentum = 0
  float* p_out;
  float* buf_out;    // null when buf is
  const float* g;
  uint16_t* lp;  // bf16 or fp16 bits, or null
  LowPrecision lp_type;
  float weight_decay;  // used when l2
  float momentum, one_minus_dampening;
  float neg_lr;
  bool l2;
  bool first;  // the buffer's first update: b = d (its old contents are not read)
  bool nesterov;
};

using AdamFn = void (*)(const AdamArgs& a, int64_t begin, int64_t end);
using SgdFn = void (*)(const SgdArgs& a, int64_t begin, int64_t end);

void adam_scalar(const AdamArgs& a, int64_t begin, int64_t end);
void adam_avx2(const AdamArgs& a, int64_t begin, int64_t end);
void adam_avx512(const AdamArgs& a, int64_t begin, int64_t end);

void sgd_scalar(const SgdArgs& a, int64_t begin, int64_t end);
void sgd_avx2(const SgdArgs& a, int64_t begin, int64_t end);
void sgd_avx512(const SgdArgs& a, int64_t begin, int64_t end);

}  // namespace zeroshard::cpu_optim
