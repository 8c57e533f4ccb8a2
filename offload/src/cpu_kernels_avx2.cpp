// SPDX-License-Identifier: Apache-2.0
// AVX2 + FMA + F16C kernels, 8 floats per step. Compiled with -mavx2 -mfma -mf16c (this file only);
// run only where detect_simd() found those features. Same math as the scalar kernels.

#include <immintrin.h>

#include "cpu_kernels.h"

namespace zeroshard::cpu_optim {
namespace {

// Round-to-nearest-even fp32 -> bf16 bits (NaN -> 0x7FC0), as c10::BFloat16(float).
__m128i to_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256 ordered = _mm256_cmp_ps(x, x, _CMP_ORD_Q);
  r = _mm256_blendv_epi8(_mm256_set1_epi32(0x7FC0), r, _mm256_castps_si256(ordered));
  // packus works per 128-bit lane: [r0..3 r0..3 | r4..7 r4..7]; gather quads 0 and 2.
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8));
}

// lp_ptr[0, 8) = p in `type` (nothing for kNone).
inline void store_lp(LowPrecision type, uint16_t* lp_ptr, __m256 p) {
  if (type == LowPrecision::kBf16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lp_ptr), to_bf16(p));
  } else if (type == LowPrecision::kFp16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lp_ptr),
                     _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// ---- Adam ----

// Elements [0, 8) of the given pointers.
inline void adam8(const AdamArgs& a, const float* p_ptr, const float* m_ptr, const float* v_ptr, const float* g_ptr,
                  float* p_out, float* m_out, float* v_out, uint16_t* lp_ptr) {
  __m256 p = _mm256_loadu_ps(p_ptr);
  __m256 g = _mm256_loadu_ps(g_ptr);
  if (a.decoupled) p = _mm256_mul_ps(p, _mm256_set1_ps(a.decay));
  if (a.l2) g = _mm256_fmadd_ps(p, _mm256_set1_ps(a.weight_decay), g);
  const __m256 m = _mm256_fmadd_ps(g, _mm256_set1_ps(a.one_minus_beta1),
                                   _mm256_mul_ps(_mm256_loadu_ps(m_ptr), _mm256_set1_ps(a.beta1)));
  const __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(a.one_minus_beta2), g), g,
                                   _mm256_mul_ps(_mm256_loadu_ps(v_ptr), _mm256_set1_ps(a.beta2)));
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), _mm256_set1_ps(a.sqrt_bc2)),
                                     _mm256_set1_ps(a.eps));
  p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(a.neg_step_size), m), denom));
  _mm256_storeu_ps(p_out, p);
  _mm256_storeu_ps(m_out, m);
  _mm256_storeu_ps(v_out, v);
  store_lp(a.lp_type, lp_ptr, p);
}

// ---- SGD ----

// Elements [0, 8) of the given pointers (buf_ptr unused without momentum).
inline void sgd8(const SgdArgs& a, const float* p_ptr, const float* buf_ptr, const float* g_ptr, float* p_out,
                 float* buf_out, uint16_t* lp_ptr) {
  __m256 p = _mm256_loadu_ps(p_ptr);
  __m256 d = _mm256_loadu_ps(g_ptr);
  if (a.l2) d = _mm256_fmadd_ps(p, _mm256_set1_ps(a.weight_decay), d);
  if (a.buf != nullptr) {
    const __m256 mom = _mm256_set1_ps(a.momentum);
    const __m256 b =
        a.first ? d
                : _mm256_fmadd_ps(d, _mm256_set1_ps(a.one_minus_dampening),
                                  _mm256_mul_ps(_mm256_loadu_ps(buf_ptr), mom));
    _mm256_storeu_ps(buf_out, b);
    d = a.nesterov ? _mm256_fmadd_ps(b, mom, d) : b;
  }
  p = _mm256_fmadd_ps(d, _mm256_set1_ps(a.neg_lr), p);
  _mm256_storeu_ps(p_out, p);
  store_lp(a.lp_type, lp_ptr, p);
}

}  // namespace

// The tails (< 8 elements) go through zero-padded buffers, so they run exactly the same
// instructions as the body.

void adam_avx2(const AdamArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    adam8(a, a.p + i, a.m + i, a.v + i, a.g + i, a.p_out + i, a.m_out + i, a.v_out + i, a.lp ? a.lp + i : nullptr);
  }
  if (i == end) return;
  const int64_t n = end - i;
  alignas(32) float p[8] = {}, m[8] = {}, v[8] = {}, g[8] = {};
  alignas(16) uint16_t lp[8] = {};
  for (int64_t k = 0; k < n; ++k) {
    p[k] = a.p[i + k];
    m[k] = a.m[i + k];
    v[k] = a.v[i + k];
    g[k] = a.g[i + k];
  }
  adam8(a, p, m, v, g, p, m, v, lp);
  for (int64_t k = 0; k < n; ++k) {
    a.p_out[i + k] = p[k];
    a.m_out[i + k] = m[k];
    a.v_out[i + k] = v[k];
    if (a.lp) a.lp[i + k] = lp[k];
  }
}

void sgd_avx2(const SgdArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    sgd8(a, a.p + i, a.buf ? a.buf + i : nullptr, a.g + i, a.p_out + i, a.buf_out ? a.buf_out + i : nullptr,
         a.lp ? a.lp + i : nullptr);
  }
  if (i == end) return;
  const int64_t n = end - i;
  alignas(32) float p[8] = {}, buf[8] = {}, g[8] = {};
  alignas(16) uint16_t lp[8] = {};
  for (int64_t k = 0; k < n; ++k) {
    p[k] = a.p[i + k];
    if (a.buf && !a.first) buf[k] = a.buf[i + k];
    g[k] = a.g[i + k];
  }
  sgd8(a, p, buf, g, p, buf, lp);
  for (int64_t k = 0; k < n; ++k) {
    a.p_out[i + k] = p[k];
    if (a.buf_out) a.buf_out[i + k] = buf[k];
    if (a.lp) a.lp[i + k] = lp[k];
  }
}

}  // namespace zeroshard::cpu_optim
