// SPDX-License-Identifier: Apache-2.0
#pragma once
// CPU features that __builtin_cpu_supports does not name on every compiler (clang before 16 has no
// "f16c"), read from CPUID directly.

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace zeroshard {

// F16C (half <-> float conversion instructions): CPUID leaf 1, ECX bit 29.
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
#else
  return false;
#endif
}

}  // namespace zeroshard
