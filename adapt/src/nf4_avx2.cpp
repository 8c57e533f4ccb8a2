// SPDX-License-Identifier: Apache-2.0
// AVX2 NF4 dequantisation: 8 elements per step (4 code bytes), the codebook looked up with two
// in-register permutes, multiplied by the block maximum, rounded to the output dtype as the
// scalar path rounds (bf16: to nearest even; fp16: F16C's round to nearest).
#include <immintrin.h>

#include <cstring>

#include "nf4_kernels.h"

namespace zeroshard::nf4::detail {

void dequantize_avx2(const float* cb, const uint8_t* codes, const uint8_t* maxima, int64_t begin, int64_t end,
                     void* out, OutKind kind) {
  constexpr int64_t kBlock = kKernelBlock;
  const __m256 low_half = _mm256_loadu_ps(cb);
  const __m256 high_half = _mm256_loadu_ps(cb + 8);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  const __m256i nibble = _mm256_set1_epi32(15);
  const __m256i round_bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  for (int64_t b = begin; b < end; ++b) {
    float scale;
    std::memcpy(&scale, maxima + 4 * b, 4);
    const __m256 vscale = _mm256_set1_ps(scale);
    const uint8_t* c = codes + b * (kBlock / 2);
    for (int j = 0; j < kBlock / 8; ++j) {
      uint32_t word;
      std::memcpy(&word, c + 4 * j, 4);
      const __m128i bytes = _mm_cvtsi32_si128(static_cast<int>(word));
      const __m256i lanes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));  // b0 b0 b1 b1 ...
      const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(lanes, shifts), nibble);
      const __m256 from_low = _mm256_permutevar8x32_ps(low_half, idx);
      const __m256 from_high = _mm256_permutevar8x32_ps(high_half, idx);
      const __m256 v = _mm256_mul_ps(
          _mm256_blendv_ps(from_low, from_high, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28))), vscale);
      const int64_t at = b * kBlock + j * 8;
      if (kind == OutKind::kFloat) {
        _mm256_storeu_ps(static_cast<float*>(out) + at, v);
      } else if (kind == OutKind::kHalf) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + at),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      } else {
        __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        u = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, round_bias), lsb), 16);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + at), _mm256_castsi256_si128(packed));
      }
    }
  }
}

}  // namespace zeroshard::nf4::detail
