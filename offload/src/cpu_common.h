// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host-side helpers shared by the fused CPU optimizers (cpu_adam.cpp, cpu_sgd.cpp): option checks,
// the low-precision output's kind, and the split of a shard into tiles over
// OpenMP threads. Never include this from a file compiled with ISA flags (cpu_kernels_*.cpp).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "cpu_kernels.h"

namespace zeroshard::cpu_optim {

// Throws UsageError "<options>.<field> = <v> is out of range; allowed: [lo, hi)" unless `v` is
// finite and within the bounds (an open end excludes the bound; hi = inf: no upper bound).
void check_range(const char* options, const char* field, double v, double lo, bool lo_open,
                 double hi, bool hi_open);

// kNone for an undefined tensor, else kBf16 or kFp16 (the tensor was checked to be one of those).
LowPrecision low_precision_of(const at::Tensor& lp);
// Its data as bf16/fp16 bits, or null when undefined.
uint16_t* low_precision_data(const at::Tensor& lp);

// Elements per tile: large enough to amortize the OpenMP schedule, small enough to balance.
constexpr int64_t kTile = 1 << 16;

// Calls fn(begin, end) for the tiles of [0, n), spread over the OpenMP threads (when built with
// OpenMP and there is more than one tile). fn must be safe to call concurrently on disjoint ranges.
void run_tiles(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace zeroshard::cpu_optim
