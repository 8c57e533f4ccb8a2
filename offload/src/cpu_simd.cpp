// SPDX-License-Identifier: Apache-2.0
// CPU feature detection for the fused optimizers' SIMD paths, and the shared host-side helpers of
// cpu_common.h.

#include "zeroshard/offload/cpu_simd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#ifdef ZS_OFFLOAD_OPENMP
#include <omp.h>
#endif

#include "cpu_common.h"
#include "zeroshard/base/cpu_features.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {

// ---- CPU features ----

namespace {

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         cpu_has_f16c();
}

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && cpu_has_avx2();
}

// The cap set by ZS_CPU_SIMD_MAX (kAvx512: no cap).
SimdPath simd_cap() {
  const char* env = std::getenv("ZS_CPU_SIMD_MAX");
  if (env == nullptr || *env == '\0') return SimdPath::kAvx512;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (std::strcmp(env, to_string(p)) == 0) return p;
  }
  ZS_THROW(UsageError, "ZS_CPU_SIMD_MAX = '", env, "' is not valid; allowed: scalar, avx2, avx512");
}

}  // namespace

const char* to_string(SimdPath path) {
  switch (path) {
    case SimdPath::kAuto: return "auto";
    case SimdPath::kScalar: return "scalar";
    case SimdPath::kAvx2: return "avx2";
    case SimdPath::kAvx512: return "avx512";
  }
  return "?";
}

std::string cpu_simd_flags() {
  const std::pair<const char*, bool> flags[] = {
      {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
      {"f16c", cpu_has_f16c()},         {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")}, {"avx512vl", __builtin_cpu_supports("avx512vl")},
      {"avx512dq", __builtin_cpu_supports("avx512dq")}};
  std::string s;
  for (const auto& [name, has] : flags) {
    if (has) s += std::string(s.empty() ? "" : " ") + name;
  }
  return s.empty() ? "none of avx2, fma, f16c, avx512f/bw/vl/dq" : s;
}

bool simd_supported(SimdPath path) {
  const SimdPath cap = simd_cap();
  switch (path) {
    case SimdPath::kAuto:
    case SimdPath::kScalar: return true;
    case SimdPath::kAvx2: return cap != SimdPath::kScalar && cpu_has_avx2();
    case SimdPath::kAvx512: return cap == SimdPath::kAvx512 && cpu_has_avx512();
  }
  return false;
}

SimdPath detect_simd() {
  if (simd_supported(SimdPath::kAvx512)) return SimdPath::kAvx512;
  if (simd_supported(SimdPath::kAvx2)) return SimdPath::kAvx2;
  return SimdPath::kScalar;
}

int cpu_optimizer_threads() {
#ifdef ZS_OFFLOAD_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ---- shared host-side helpers ----

namespace cpu_optim {

void check_range(const char* options, const char* field, double v, double lo, bool lo_open,
                 double hi, bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  ZS_REQUIRE(ok, UsageError, options, ".", field, " = ", format_double(v),
             " is out of range; allowed: ", lo_open ? "(" : "[", format_double(lo), ", ",
             std::isinf(hi) ? "inf)" : format_double(hi) + (hi_open ? ")" : "]"));
}

LowPrecision low_precision_of(const at::Tensor& lp) {
  if (!lp.defined()) return LowPrecision::kNone;
  return lp.scalar_type() == at::kBFloat16 ? LowPrecision::kBf16 : LowPrecision::kFp16;
}

uint16_t* low_precision_data(const at::Tensor& lp) {
  return lp.defined() ? static_cast<uint16_t*>(lp.data_ptr()) : nullptr;
}

void run_tiles(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t tiles = (n + kTile - 1) / kTile;
#ifdef ZS_OFFLOAD_OPENMP
#pragma omp parallel for schedule(static) if (tiles > 1)
#endif
  for (int64_t t = 0; t < tiles; ++t) {
    fn(t * kTile, std::min(n, (t + 1) * kTile));
  }
}

}  // namespace cpu_optim
}  // namespace zeroshard
