// The portable kernel: any CPU; the reference the SIMD kernels follow. std::fma keeps torch's
// single roundings (a library call, slow, on a CPU without FMA, where this kernel is the fallback).

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>

#include "cpu_adam_kernels.h"

namespace zeroshard::cpu_adam {

void adam_scalar(const KernelArgs& a, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float p = a.p[i];
    float g = a.g[i];
    if (a.decoupled) p = p * a.decay;
    if (a.l2) g = std::fma(p, a.weight_decay, g);
    const float m = std::fma(g, a.one_minus_beta1, a.m[i] * a.beta1);
    const float v = std::fma(a.one_minus_beta2 * g, g, a.v[i] * a.beta2);
    const float denom = std::sqrt(v) / a.sqrt_bc2 + a.eps;
    p = p + (a.neg_step_size * m) / denom;
    a.p[i] = p;
    a.m[i] = m;
    a.v[i] = v;
    if (a.lp_type == LowPrecision::kBf16) {
      a.lp[i] = c10::BFloat16(p).x;  // round to nearest even, as Tensor::to(kBFloat16)
    } else if (a.lp_type == LowPrecision::kFp16) {
      a.lp[i] = c10::Half(p).x;
    }
  }
}

}  // namespace zeroshard::cpu_adam
