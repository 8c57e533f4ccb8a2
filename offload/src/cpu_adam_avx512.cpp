// AVX-512 kernel (F, BW, VL, DQ), 16 floats per step, tail by masked loads and stores. Compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512dq (this file only); runs only where detect_simd()
// found those features. Same math as adam_scalar.

#include <immintrin.h>

#include "cpu_adam_kernels.h"

namespace zeroshard::cpu_adam {
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

// Elements [i, i + 16) where `mask` is set.
inline void step16(const KernelArgs& a, int64_t i, __mmask16 mask) {
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
  _mm512_mask_storeu_ps(a.p + i, mask, p);
  _mm512_mask_storeu_ps(a.m + i, mask, m);
  _mm512_mask_storeu_ps(a.v + i, mask, v);
  if (a.lp_type == LowPrecision::kBf16) {
    _mm256_mask_storeu_epi16(a.lp + i, mask, to_bf16(p));
  } else if (a.lp_type == LowPrecision::kFp16) {
    _mm256_mask_storeu_epi16(a.lp + i, mask,
                             _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

}  // namespace

void adam_avx512(const KernelArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) step16(a, i, static_cast<__mmask16>(0xFFFF));
  if (i < end) step16(a, i, static_cast<__mmask16>((1u << (end - i)) - 1));
}

}  // namespace zeroshard::cpu_adam
