// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/comm/quantize.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/round.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/BFloat16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define ZS_QUANT_AVX2 1
#else
#define ZS_QUANT_AVX2 0
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "zeroshard/base/error.h"

namespace zeroshard::quant {
namespace {

void check_block(int64_t block) {
  ZS_REQUIRE(block >= 8 && block <= 65536 && block % 4 == 0, UsageError, "int8 quantization block of ", block,
             " elements: a block is a multiple of 4 in [8, 65536]");
}

int64_t blocks_of(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

}  // namespace

int64_t int8_encoded_bytes(int64_t numel, int64_t block) {
  check_block(block);
  ZS_REQUIRE(numel >= 0, UsageError, "int8 quantization of ", numel, " elements");
  return blocks_of(numel, block) * (4 + block);
}

namespace {

void check_values(const at::Tensor& values) {
  ZS_REQUIRE(values.dim() == 1 && values.is_contiguous() && at::isFloatingType(values.scalar_type()), UsageError,
             "encode_int8: the values must be a contiguous 1-D floating tensor, got ", values.sizes(), " ",
             c10::toString(values.scalar_type()));
}

void check_encoded_out(const at::Tensor& values, int64_t block, const at::Tensor& out) {
  const int64_t bytes = int8_encoded_bytes(values.numel(), block);
  ZS_REQUIRE(out.dim() == 1 && out.is_contiguous() && out.scalar_type() == at::kByte && out.numel() == bytes &&
                 out.device() == values.device(),
             UsageError, "encode_int8_into: the output must be a contiguous uint8 tensor of ", bytes, " bytes on ",
             values.device(), ", got ", out.sizes(), " ", c10::toString(out.scalar_type()), " on ", out.device());
}

void check_decode(const at::Tensor& encoded, int64_t block, const at::Tensor& out, const char* what) {
  const int64_t n = out.numel();
  ZS_REQUIRE(encoded.dim() == 1 && encoded.scalar_type() == at::kByte && encoded.numel() == int8_encoded_bytes(n, block),
             UsageError, what, ": ", encoded.numel(), " encoded bytes for ", n, " elements in blocks of ", block,
             " (expected ", int8_encoded_bytes(n, block), ")");
  ZS_REQUIRE(out.is_contiguous() && at::isFloatingType(out.scalar_type()), UsageError, what,
             ": the output must be a contiguous floating tensor");
}

bool one_pass(const at::Tensor& t) {
  return t.is_cpu() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

// Blocks per task of at::parallel_for: about 64 KiB of values.
int64_t grain(int64_t block) { return std::max<int64_t>(1, 16384 / block); }

// One pass per block, in the arithmetic of the LibTorch ops in reference:: (fp32 throughout, no
// fused multiply-add: this file is compiled with -ffp-contract=off), so the bytes are the same.
// Two versions of each: AVX2 intrinsics, and portable code for CPUs without AVX2 (chosen once).
constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: (y + kRound) - kRound rounds |y| < 2^22 half to even

// bf16 values widen to fp32 exactly; fp32 results narrow to bf16 rounding to nearest even (NaN:
// 0x7FC0), as LibTorch's conversions do.
inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }
inline void narrow_to(float* o, float d) { *o = d; }
inline void narrow_to(c10::BFloat16* o, float d) { *o = c10::BFloat16(d); }

#if ZS_QUANT_AVX2
__attribute__((target("avx2"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2"))) inline __m256 load8(const c10::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2"))) inline void store8(float* o, __m256 d) { _mm256_storeu_ps(o, d); }
__attribute__((target("avx2"))) inline void store8(c10::BFloat16* o, __m256 d) {
  const __m256i bits = _mm256_castps_si256(d);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(d, d, _CMP_UNORD_Q)));
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o), packed);
}

#endif

// The block's scale: absmax / 127, NaN when a value is NaN, infinite when one is.
template <typename T>
float block_scale(const T* v, int64_t len) {
  float amax = 0;
  bool nan = false;
  for (int64_t i = 0; i < len; ++i) {
    const float a = std::fabs(widen(v[i]));
    nan |= a != a;
    amax = a > amax ? a : amax;
  }
  return nan ? NAN : amax / 127.0f;
}

// round(v x inv) clamped to [-127, 127]; infinities and NaN in v give 0, and so does NaN in the
// product (0 x the infinite inverse of a subnormal scale).
int8_t quantize_one(float x, float inv) {
  const float f = x - x == 0.0f ? x : 0.0f;
  float y = (f * inv + kRound) - kRound;
  y = 127.0f < y ? 127.0f : y;
  y = -127.0f > y ? -127.0f : y;
  return static_cast<int8_t>(y == y ? static_cast<int>(y) : 0);
}

template <typename T>
void encode_blocks_portable(const T* x, int64_t n, int64_t block, int64_t b0, int64_t b1, uint8_t* scales,
                            int8_t* q) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t begin = b * block, len = std::min(block, n - begin);
    const float scale = block_scale(x + begin, len);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t k = 0; k < len; ++k) q[begin + k] = quantize_one(widen(x[begin + k]), inv);
    for (int64_t k = len; k < block; ++k) q[begin + k] = 0;
    std::memcpy(scales + b * 4, &scale, 4);
  }
}

#if ZS_QUANT_AVX2
template <typename T>
__attribute__((target("avx2"))) void encode_blocks_avx2(const T* x, int64_t n, int64_t block, int64_t b0, int64_t b1,
                                                        uint8_t* scales, int8_t* q) {
  const __m256 zero = _mm256_setzero_ps(), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t begin = b * block, len = std::min(block, n - begin);
    const T* v = x + begin;
    const int64_t whole = len / 8 * 8;
    // absmax: max_ps(a, m) = a > m ? a : m keeps m for NaN, which a separate unordered test sees.
    __m256 m = zero, unordered = zero;
    for (int64_t i = 0; i < whole; i += 8) {
      const __m256 a = _mm256_andnot_ps(sign, load8(v + i));
      m = _mm256_max_ps(a, m);
      unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float amax = 0;
    for (float l : lanes) amax = l > amax ? l : amax;
    bool nan = _mm256_movemask_ps(unordered) != 0;
    for (int64_t i = whole; i < len; ++i) {
      const float a = std::fabs(widen(v[i]));
      nan |= a != a;
      amax = a > amax ? a : amax;
    }
    const float scale = nan ? NAN : amax / 127.0f;
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    int8_t* qb = q + begin;
    for (int64_t k = 0; k < whole; k += 8) {
      const __m256 xv = load8(v + k);
      const __m256 f = _mm256_and_ps(xv, _mm256_cmp_ps(_mm256_sub_ps(xv, xv), zero, _CMP_EQ_OQ));
      __m256 y = _mm256_round_ps(_mm256_mul_ps(f, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      y = _mm256_min_ps(hi, y);  // 127 < y ? 127 : y (NaN stays)
      y = _mm256_max_ps(lo, y);  // -127 > y ? -127 : y (NaN stays)
      y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));  // NaN: 0
      const __m256i i32 = _mm256_cvttps_epi32(y);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(qb + k), _mm_packs_epi16(i16, i16));
    }
    for (int64_t k = whole; k < len; ++k) qb[k] = quantize_one(widen(v[k]), inv);
    for (int64_t k = len; k < block; ++k) qb[k] = 0;
    std::memcpy(scales + b * 4, &scale, 4);
  }
}

#endif

float decode_scale(const uint8_t* scales, int64_t b) {
  float scale;
  std::memcpy(&scale, scales + b * 4, 4);
  return std::isfinite(scale) ? scale : NAN;
}

template <bool kAdd, typename T>
void decode_blocks_portable(const uint8_t* scales, const int8_t* q, int64_t n, int64_t block, int64_t b0, int64_t b1,
                            T* out) {
  for (int64_t b = b0; b < b1; ++b) {
    const float scale = decode_scale(scales, b);
    const int64_t begin = b * block, len = std::min(block, n - begin);
    for (int64_t i = 0; i < len; ++i) {
      const float d = static_cast<float>(q[begin + i]) * scale;
      if constexpr (kAdd) {
        out[begin + i] = out[begin + i] + d;
      } else {
        narrow_to(out + begin + i, d);
      }
    }
  }
}

#if ZS_QUANT_AVX2
template <bool kAdd, typename T>
__attribute__((target("avx2"))) void decode_blocks_avx2(const uint8_t* scales, const int8_t* q, int64_t n,
                                                        int64_t block, int64_t b0, int64_t b1, T* out) {
  for (int64_t b = b0; b < b1; ++b) {
    const float scale = decode_scale(scales, b);
    const __m256 vs = _mm256_set1_ps(scale);
    const int64_t begin = b * block, len = std::min(block, n - begin), whole = len / 8 * 8;
    const int8_t* qb = q + begin;
    T* o = out + begin;
    for (int64_t i = 0; i < whole; i += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qb + i));
      __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), vs);
      if constexpr (kAdd) d = _mm256_add_ps(load8(o + i), d);
      store8(o + i, d);
    }
    for (int64_t i = whole; i < len; ++i) {
      const float d = static_cast<float>(qb[i]) * scale;
      if constexpr (kAdd) {
        o[i] = o[i] + d;
      } else {
        narrow_to(o + i, d);
      }
    }
  }
}

#endif

std::atomic<bool> g_portable_only{false};

bool have_avx2() {
#if ZS_QUANT_AVX2
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes && !g_portable_only.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

template <typename T>
void encode_values(const T* x, int64_t n, int64_t block, uint8_t* out) {
  const int64_t nb = blocks_of(n, block);
  auto* q = reinterpret_cast<int8_t*>(out + nb * 4);
  [[maybe_unused]] const bool avx2 = have_avx2();
  at::parallel_for(0, nb, grain(block), [&](int64_t b0, int64_t b1) {
#if ZS_QUANT_AVX2
    if (avx2) return encode_blocks_avx2(x, n, block, b0, b1, out, q);
#endif
    encode_blocks_portable(x, n, block, b0, b1, out, q);
  });
}

template <bool kAdd, typename T>
void decode_values(const uint8_t* in, int64_t n, int64_t block, T* out) {
  const int64_t nb = blocks_of(n, block);
  const auto* q = reinterpret_cast<const int8_t*>(in + nb * 4);
  [[maybe_unused]] const bool avx2 = have_avx2();
  at::parallel_for(0, nb, grain(block), [&](int64_t b0, int64_t b1) {
#if ZS_QUANT_AVX2
    if (avx2) return decode_blocks_avx2<kAdd>(in, q, n, block, b0, b1, out);
#endif
    decode_blocks_portable<kAdd>(in, q, n, block, b0, b1, out);
  });
}

}  // namespace

at::Tensor encode_int8(const at::Tensor& values, int64_t block) {
  check_values(values);
  at::Tensor out = at::empty({int8_encoded_bytes(values.numel(), block)}, values.options().dtype(at::kByte));
  encode_int8_into(values, block, out);
  return out;
}

void encode_int8_into(const at::Tensor& values, int64_t block, const at::Tensor& out) {
  check_values(values);
  check_encoded_out(values, block, out);
  if (values.numel() == 0) return;
  if (!one_pass(values)) return reference::encode_int8_into(values, block, out);
  if (values.scalar_type() == at::kBFloat16) {
    return encode_values(values.data_ptr<c10::BFloat16>(), values.numel(), block, out.data_ptr<uint8_t>());
  }
  encode_values(values.data_ptr<float>(), values.numel(), block, out.data_ptr<uint8_t>());
}

void decode_int8(const at::Tensor& encoded, int64_t block, const at::Tensor& out) {
  check_decode(encoded, block, out, "decode_int8");
  if (out.numel() == 0) return;
  if (!one_pass(out) || !encoded.is_cpu()) return reference::decode_int8(encoded, block, out);
  const at::Tensor bytes = encoded.contiguous();
  const uint8_t* in = bytes.data_ptr<uint8_t>();
  if (out.scalar_type() == at::kBFloat16) {
    return decode_values<false>(in, out.numel(), block, out.data_ptr<c10::BFloat16>());
  }
  decode_values<false>(in, out.numel(), block, out.data_ptr<float>());
}

void decode_int8_add(const at::Tensor& encoded, int64_t block, const at::Tensor& out) {
  check_decode(encoded, block, out, "decode_int8_add");
  ZS_REQUIRE(out.scalar_type() == at::kFloat, UsageError, "decode_int8_add: the output must be fp32, got ",
             c10::toString(out.scalar_type()));
  if (out.numel() == 0) return;
  if (!encoded.is_cpu() || !out.is_cpu()) {
    const at::Tensor decoded = at::empty_like(out);
    reference::decode_int8(encoded, block, decoded);
    out.add_(decoded);
    return;
  }
  decode_values<true>(encoded.contiguous().data_ptr<uint8_t>(), out.numel(), block, out.data_ptr<float>());
}

namespace detail {
void use_portable_kernels(bool yes) { g_portable_only = yes; }
}  // namespace detail

namespace reference {

void encode_int8_into(const at::Tensor& values, int64_t block, const at::Tensor& out) {
  check_values(values);
  check_encoded_out(values, block, out);
  const int64_t n = values.numel();
  if (n == 0) return;
  c10::AutoGradMode no_grad(false);
  const int64_t nb = blocks_of(n, block);
  at::Tensor x = values.to(at::kFloat);
  if (nb * block != n) x = at::constant_pad_nd(x, {0, nb * block - n}, 0);
  x = x.view({nb, block});
  const at::Tensor scale = at::amax(at::abs(x), {1}).div_(127.0f);
  // 1 / scale where the scale is positive; an all-zero block keeps zeros (and a NaN scale NaN).
  const at::Tensor inv = at::where(scale > 0, at::reciprocal(scale), at::zeros_like(scale));
  // Non-finite values (their block decodes to NaN from its scale) are 0 here, so that every value
  // converted to int8 is in range.
  const at::Tensor q = at::round(at::nan_to_num(x, 0, 0, 0) * inv.unsqueeze(1)).clamp_(-127, 127).to(at::kChar);
  out.narrow(0, 0, nb * 4).copy_(scale.view(at::kByte));
  out.narrow(0, nb * 4, nb * block).copy_(q.view(at::kByte).view({-1}));
}

void decode_int8(const at::Tensor& encoded, int64_t block, const at::Tensor& out) {
  check_decode(encoded, block, out, "decode_int8");
  const int64_t n = out.numel();
  if (n == 0) return;
  c10::AutoGradMode no_grad(false);
  const int64_t nb = blocks_of(n, block);
  // The scales are copied out so that their view as fp32 starts aligned wherever `encoded` lies.
  const at::Tensor scale = encoded.narrow(0, 0, nb * 4).clone().view(at::kFloat);
  const at::Tensor q = encoded.narrow(0, nb * 4, nb * block).view(at::kChar).view({nb, block});
  // A block whose scale is not finite decodes to NaN: 0 x inf would give NaN for some of its values
  // and 0 for its zeros, hiding how much of it was lost.
  const at::Tensor finite = scale.isfinite();
  at::Tensor v = q.to(at::kFloat).mul_(at::where(finite, scale, at::full_like(scale, NAN)).unsqueeze(1));
  out.view({-1}).copy_(v.view({-1}).narrow(0, 0, n));
}

}  // namespace reference

}  // namespace zeroshard::quant
