// SPDX-License-Identifier: Apache-2.0
#pragma once
// One fused Adam/AdamW update of n contiguous elements with caller-held state: the kernel call
// behind FusedCpuAdam, shared with the offloaded optimizer, which streams chunks of its state
// through host buffers. Private to zs_offload.

#include <cstdint>
#include <vector>

#include "cpu_kernels.h"
#include "zeroshard/offload/cpu_adam.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard::detail {

// `update` is this shard's 1-based update count (bias correction); `lr` the current rate. `lp`
// may be null (no low-precision copy). Spreads the work over OpenMP tiles.
// The new p, m, v go to p_out, m_out, v_out when given (the inputs then stay as they were), else
// in place.
void adam_update(SimdPath path, const CpuAdamOptions& o, double lr, int64_t update, float* p, const float* g,
                 float* m, float* v, uint16_t* lp, cpu_optim::LowPrecision lp_type, int64_t n,
                 float* p_out = nullptr, float* m_out = nullptr, float* v_out = nullptr);

// adam_update of the shard's elements [offset, offset + n), part by part as `runs` (shard_runs of
// the shard) cut them: each part with its run's weight decay and lr() * lr_scale. The pointers
// point at element `offset`.
void adam_update_runs(SimdPath path, const CpuAdamOptions& o, const std::vector<ShardGroupRange>& runs,
                      double lr, int64_t update, int64_t offset, float* p, const float* g, float* m, float* v,
                      uint16_t* lp, cpu_optim::LowPrecision lp_type, int64_t n, float* p_out = nullptr,
                      float* m_out = nullptr, float* v_out = nullptr);

}  // namespace zeroshard::detail
