// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CUDA caching allocator's statistics, limit and blocks, for memory reports. Private to
// zs_core. Two implementations, chosen at configure time like cuda_stream.h's:
//   cuda_memory_torch.cpp  LibTorch with CUDA (c10_cuda);
//   cuda_memory_none.cpp   CPU-only LibTorch: no statistics; a limit on a CUDA device is an error
//                          (it cannot happen: such a build cannot run on CUDA).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::detail {

// Makes `device` this process's current CUDA device (c10::cuda::set_device: LibTorch's streams,
// NCCL and cudaMalloc then use it) and initialises LibTorch's CUDA caching allocator, which
// set_cuda_memory_limit and set_cuda_oom_observer need. Creates the CUDA context on `device` only.
// CPU-only builds: ConfigError (the device cannot resolve to CUDA there).
void activate_cuda_device(int device);

// The PCI bus id of `device` ("0000:41:00.0"), to tell whether two processes were given the same
// GPU; creates no context. Empty in CPU-only builds.
std::string cuda_device_pci_id(int device);

struct CudaAllocatorStats {
  bool available = false;
  int64_t allocated_current = 0, allocated_peak = 0, allocated_total = 0, freed_total = 0;
  int64_t reserved_current = 0, reserved_peak = 0;
  int64_t active_current = 0, active_peak = 0;
  int64_t allocations_current = 0, allocations_total = 0;
  int64_t num_ooms = 0, num_alloc_retries = 0;
  int64_t device_total = 0;  // the device's memory (cudaDeviceProp::totalGlobalMem)
};
CudaAllocatorStats cuda_allocator_stats(int device);

// Sets the caching allocator's per-process memory fraction to `bytes` of the device's memory.
// ConfigError (naming `source`, where the limit came from) when `bytes` exceeds the device's memory. Needs
// activate_cuda_device first (the allocator must be initialised).
void set_cuda_memory_limit(int device, int64_t bytes, const std::string& source);

struct CudaBlock {
  int64_t bytes = 0;      // block size
  int64_t requested = 0;  // bytes the caller asked for
  int64_t segment = 0;    // size of the segment (cudaMalloc) holding it
  bool large_pool = false;
};
// Calls `observer` when the caching allocator runs out of memory on any device, before it throws
// (LibTorch's out-of-memory observer). Needs an initialised allocator (activate_cuda_device) on a
// CUDA device. No-op without a CUDA LibTorch.
void set_cuda_oom_observer(void (*observer)());

// The `n` largest allocated (live) blocks on `device`, largest first.
std::vector<CudaBlock> largest_cuda_blocks(int device, size_t n);

}  // namespace zeroshard::detail
