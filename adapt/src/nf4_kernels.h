// SPDX-License-Identifier: Apache-2.0
#pragma once
// NF4 dequantisation kernels for CPU (nf4.cpp: scalar; nf4_avx2.cpp: built with -mavx2 -mf16c).
// Blocks [begin, end) of 64 elements; `maxima` unaligned fp32; `codebook` the 16 values.
// nf4_avx2.cpp includes nothing else of ours or LibTorch's: inline functions of headers compiled
// with -mavx2 could be the copy the linker keeps for every caller.

#include <cstdint>

namespace zeroshard::nf4::detail {

enum class OutKind { kFloat, kBFloat16, kHalf };

constexpr int64_t kKernelBlock = 64;

void dequantize_avx2(const float* codebook, const uint8_t* codes, const uint8_t* maxima, int64_t begin, int64_t end,
                     void* out, OutKind kind);

}  // namespace zeroshard::nf4::detail
