// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which SIMD kernel the fused CPU optimizers (FusedCpuAdam, FusedCpuSgd) run, and on how many
// threads. The kernels are built for every path; the choice is made at run time from the CPU's
// features, so the library runs on any x86-64. Thread-safe (reads the CPU and the environment).

#include <string>

namespace zeroshard {

// Instruction sets the kernels are built for. kAuto: the best this CPU supports.
enum class SimdPath { kAuto, kScalar, kAvx2, kAvx512 };

// "auto", "scalar", "avx2" or "avx512".
const char* to_string(SimdPath path);

// The best path this CPU supports: kAvx512 needs avx512f/bw/vl/dq, kAvx2 needs avx2, fma and f16c.
// The environment variable ZS_CPU_SIMD_MAX=scalar|avx2|avx512 caps the answer (to test the
// fallbacks on a newer CPU); any other value is a UsageError.
SimdPath detect_simd();
// Whether `path` can run here (kAuto and kScalar always can); honours ZS_CPU_SIMD_MAX.
bool simd_supported(SimdPath path);
// The relevant CPU flags this CPU has, e.g. "avx2 fma f16c avx512f avx512bw avx512vl avx512dq".
std::string cpu_simd_flags();
// Threads the fused kernels use: omp_get_max_threads() (which at::set_num_threads sets too) when
// the library was built with OpenMP, else 1.
int cpu_optimizer_threads();

}  // namespace zeroshard
