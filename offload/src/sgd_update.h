// SPDX-License-Identifier: Apache-2.0
#pragma once
// One fused SGD update of n contiguous elements with a caller-held momentum buffer: the kernel
// call behind FusedCpuSgd, shared with the offloaded optimizer, which streams chunks of its state
// through host buffers. Private to zs_offload.

#include <cstdint>
#include <vector>

#include "cpu_kernels.h"
#include "zeroshard/offload/cpu_simd.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard::detail {

// The shard's elements [offset, offset + n), part by part as `runs` (shard_runs of the shard) cut
// them: each part with its run's weight decay and lr * lr_scale. The pointers point at element
// `offset`. `buf` is the momentum buffer (null when o.momentum = 0); `first`: the buffer holds
// nothing yet (b = d, its contents not read). `lp` may be null (no low-precision copy). Spreads
// the work over OpenMP tiles. The new p and buffer go to p_out and buf_out when given (the inputs
// then stay as they were), else in place.
void sgd_update_runs(SimdPath path, const SgdOptions& o, const std::vector<ShardGroupRange>& runs, double lr,
                     bool first, int64_t offset, float* p, const float* g, float* buf, uint16_t* lp,
                     cpu_optim::LowPrecision lp_type, int64_t n, float* p_out = nullptr, float* buf_out = nullptr);

}  // namespace zeroshard::detail
