// SPDX-License-Identifier: Apache-2.0
// AVX-512 kernels (F, BW, VL, DQ), 16 floats per step, tails by masked loads and stores. Compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512dq (this file only); run only where detect_simd()
// found those features. Same math as the scalar kernels.

#include <immintrin.h>

#include "cpu_kernels.h"

namespace zeroshard::cpu_optim {
namespace {

// Round-to-nearest-even fp32 -> bf16 bits (NaN -> 0x7FC0), as c10::BFloat16(float).
__m256i to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 ordered = _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);
  r = _mm512_mask_blend_epi32(ordered, _mm512_set1_epi32(0x7FC0), r);
  return _mm512_cvtepi32_epi16(r);
}

// lp[i, i + 16) = p in `type` where `mask` is set (nothing for kNone).
inline void store_lp(LowPrecision type, uint16_t* lp, int64_t i, __mmask16 mask, __m512 p) {
  if (type == LowPrecision::kBf16) {
    _mm256_mask_storeu_epi16(lp + i, mask, to_bf16(p));
  } else if (type == LowPrecision::kFp16) {
    _mm256_mask_storeu_epi16(lp + i, mask,
                             _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// Elements [i, i + 16) where `mask` is set.
inline void adam16(const AdamArgs& a, int64_t i, __mmask16 mask) {
  __m512 p = _mm512_maskz_loadu_ps(mask, a.p + i);
  __m512 g = _mm512_maskz_loadu_ps(mask, a.g + i);
  if (a.decoupled) p = _mm512_mul_ps(p, _mm512_set1_ps(a.decay));
  if (a.l2) g = _mm512_fmadd_ps(p, _mm512_set1_ps(a.weight_decay), g);
  const __m512 m = _mm512_fmadd_ps(g, _mm512_set1_ps(a.one_minus_beta1),
                                   _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, a.m + i), _mm512_set1_ps(a.beta1)));
  const __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(a.one_minus_beta2), g), g,
                                   _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, a.v + i), _mm512_set1_ps(a.beta2)));
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), _mm512_set1_ps(a.sqrt_bc2)),
                                     _mm512_set1_ps(a.eps));
  p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(a.neg_step_size), m), denom));
  _mm512_mask_storeu_ps(a.p_out + i, mask, p);
  _mm512_mask_storeu_ps(a.m_out + i, mask, m);
  _mm512_mask_storeu_ps(a.v_out + i, mask, v);
  store_lp(a.lp_type, a.lp, i, mask, p);
}

// Elements [i, i + 16) where `mask` is set.
inline void sgd16(const SgdArgs& a, int64_t i, __mmask16 mask) {
  __m512 p = _mm512_maskz_loadu_ps(mask, a.p + i);
  __m512 d = _mm512_maskz_loadu_ps(mask, a.g + i);
  if (a.l2) d = _mm512_fmadd_ps(p, _mm512_set1_ps(a.weight_decay), d);
  if (a.buf != nullptr) {
    const __m512 mom = _mm512_set1_ps(a.momentum);
    const __m512 b =
        a.first ? d
                : _mm512_fmadd_ps(d, _mm512_set1_ps(a.one_minus_dampening),
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, a.buf + i), mom));
    _mm512_mask_storeu_ps(a.buf_out + i, mask, b);
    d = a.nesterov ? _mm512_fmadd_ps(b, mom, d) : b;
  }
  p = _mm512_fmadd_ps(d, _mm512_set1_ps(a.neg_lr), p);
  _mm512_mask_storeu_ps(a.p_out + i, mask, p);
  store_lp(a.lp_type, a.lp, i, mask, p);
}

constexpr __mmask16 kFull = static_cast<__mmask16>(0xFFFF);
__mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

}  // namespace

void adam_avx512(const AdamArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) adam16(a, i, kFull);
  if (i < end) adam16(a, i, tail_mask(end - i));
}

void sgd_avx512(const SgdArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) sgd16(a, i, kFull);
  if (i < end) sgd16(a, i, tail_mask(end - i));
}

}  // namespace zeroshard::cpu_optim
