// SPDX-License-Identifier: Apache-2.0
// The portable kernels: any CPU; the reference the SIMD kernels follow. std::fma keeps torch's
// single roundings (a library call, slow, on a CPU without FMA, where these kernels are the fallback).

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>

#include "cpu_kernels.h"

namespace zeroshard::cpu_optim {
namespace {

// lp[i] = p in `type` (lp is null for kNone).
void store_lp(LowPrecision type, uint16_t* lp, int64_t i, float p) {
  if (type == LowPrecision::kBf16) {
    lp[i] = c10::BFloat16(p).x;  // round to nearest even, as Tensor::to(kBFloat16)
  } else if (type == LowPrecision::kFp16) {
    lp[i] = c10::Half(p).x;
  }
}

}  // namespace

void adam_scalar(const AdamArgs& a, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float p = a.p[i];
    float g = a.g[i];
    if (a.decoupled) p = p * a.decay;
    if (a.l2) g = std::fma(p, a.weight_decay, g);
    const float m = std::fma(g, a.one_minus_beta1, a.m[i] * a.beta1);
    const float v = std::fma(a.one_minus_beta2 * g, g, a.v[i] * a.beta2);
    const float denom = std::sqrt(v) / a.sqrt_bc2 + a.eps;
    p = p + (a.neg_step_size * m) / denom;
    a.p_out[i] = p;
    a.m_out[i] = m;
    a.v_out[i] = v;
    store_lp(a.lp_type, a.lp, i, p);
  }
}

void sgd_scalar(const SgdArgs& a, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float p = a.p[i];
    float d = a.g[i];
    if (a.l2) d = std::fma(p, a.weight_decay, d);
    if (a.buf != nullptr) {
      const float b = a.first ? d : std::fma(d, a.one_minus_dampening, a.buf[i] * a.momentum);
      a.buf_out[i] = b;
      d = a.nesterov ? std::fma(b, a.momentum, d) : b;
    }
    p = std::fma(d, a.neg_lr, p);
    a.p_out[i] = p;
    store_lp(a.lp_type, a.lp, i, p);
  }
}

}  // namespace zeroshard::cpu_optim
