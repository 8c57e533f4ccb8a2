// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels the GPU tests use to hold a stream busy, so that a missing stream dependency shows up
// as wrong data instead of going unnoticed (tests/gpu/sleep_kernel.cu, compiled by nvcc).
//
// Each call queues one kernel on `stream` and returns at once; the return value is the launch's
// cudaError_t (cudaSuccess = 0). The wait is measured with the GPU's global timer, so it is at
// least `nanoseconds` whatever the clock speed.

#include <cuda_runtime.h>

#include <cstdint>

namespace zs_gpu_test {

// Spins for `nanoseconds`, then writes `value` into out[0, n).
cudaError_t sleep_then_fill(cudaStream_t stream, float* out, int64_t n, float value, uint64_t nanoseconds);

// Spins for `nanoseconds` and writes nothing.
cudaError_t sleep(cudaStream_t stream, uint64_t nanoseconds);

}  // namespace zs_gpu_test
