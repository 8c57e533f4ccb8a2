#pragma once
// The CUDA caching allocator's statistics, limit and blocks, for memory reports. Private to
// zs_core. Two implementations, chosen at configure time like cuda_stream.h's:
//   cuda_memory_torch.cpp  LibTorch with CUDA (c10_cuda);
//   cuda_memory_none.cpp   CPU-only LibTorch: no statistics; a limit on a CUDA device is an error
//                          (it cannot happen: such a build cannot run on CUDA).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeroshard::detail {

struct CudaAllocatorStats {
  bool available = false;
  int64_t allocated_current = 0, allocated_peak = 0, allocated_total = 0, freed_total = 0;
  int64_t reserved_current = 0, reserved_peak = 0;
  int64_t active_current = 0, active_peak = 0;
  int64_t allocations_current = 0, allocations_total = 0;
  int64_t num_ooms = 0, num_alloc_retries = 0;
  int64_t device_total = 0;  // the device's memory (cudaMemGetInfo)
};
CudaAllocatorStats cuda_allocator_stats(int device);

// Sets the caching allocator's per-process memory fraction to `bytes` of the device's memory.
// ConfigError (naming memory.limit_mib) when `bytes` exceeds the device's memory.
void set_cuda_memory_limit(int device, int64_t bytes);

struct CudaBlock {
  int64_t bytes = 0;      // block size
  int64_t requested = 0;  // bytes the caller asked for
  int64_t segment = 0;    // size of the segment (cudaMalloc) holding it
  bool large_pool = false;
};
// Calls `observer` when the caching allocator runs out of memory on any device, before it throws
// (LibTorch's out-of-memory observer). No-op without a CUDA LibTorch.
void set_cuda_oom_observer(void (*observer)());

// The `n` largest allocated (live) blocks on `device`, largest first.
std::vector<CudaBlock> largest_cuda_blocks(int device, size_t n);

}  // namespace zeroshard::detail
