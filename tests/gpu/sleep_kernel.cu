// SPDX-License-Identifier: Apache-2.0
// See sleep_kernel.h.
#include "sleep_kernel.h"

namespace zs_gpu_test {
namespace {

__device__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 of every block waits, then the block writes its part of the grid-stride range: no
// element is written before the wait is over.
__global__ void sleep_then_fill_kernel(float* out, int64_t n, float value, uint64_t nanoseconds) {
  if (threadIdx.x == 0) {
    const uint64_t end = global_timer_ns() + nanoseconds;
    while (global_timer_ns() < end) {
#if __CUDA_ARCH__ >= 700  // __nanosleep is sm_70+; a LibTorch built for older GPUs adds sm_50 code
      __nanosleep(20000);
#endif
    }
  }
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = value;
  }
}

}  // namespace

cudaError_t sleep_then_fill(cudaStream_t stream, float* out, int64_t n, float value, uint64_t nanoseconds) {
  constexpr int kThreads = 256;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 1 ? 1 : (wanted > 1024 ? 1024 : wanted));
  sleep_then_fill_kernel<<<blocks, kThreads, 0, stream>>>(out, n, value, nanoseconds);
  return cudaGetLastError();
}

cudaError_t sleep(cudaStream_t stream, uint64_t nanoseconds) {
  return sleep_then_fill(stream, nullptr, 0, 0.0f, nanoseconds);
}

}  // namespace zs_gpu_test
