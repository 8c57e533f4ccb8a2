// SPDX-License-Identifier: Apache-2.0
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda_memory.h"
#include "zeroshard/comm/check_cuda.h"
#include "zeroshard/base/error.h"

namespace zeroshard::detail {

namespace {
// From the device's properties: no cudaSetDevice, so no context is created on another device
// (switching to `device` and back used to leave one on GPU 0 in every rank).
int64_t device_memory(int device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
  return static_cast<int64_t>(prop->totalGlobalMem);
}
}  // namespace

void activate_cuda_device(int device) {
  const auto index = static_cast<c10::DeviceIndex>(device);
  c10::cuda::set_device(index);
  // LibTorch initialises its caching allocator lazily, on the first CUDA tensor; its memory
  // fraction and out-of-memory observer cannot be set before (setMemoryFraction asserts
  // "Allocator not initialized", attachOutOfMemoryObserver attaches to no device). One small
  // allocation through ATen runs that initialisation whatever the LibTorch version calls it;
  // emptying the cache hands its block back.
  { const at::Tensor probe = at::empty({1}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, index)); }
  c10::cuda::CUDACachingAllocator::emptyCache();
}

std::string cuda_device_pci_id(int device) {
  char id[32] = {0};
  ZS_CUDA_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof(id)), device));
  return id;
}

CudaAllocatorStats cuda_allocator_stats(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  constexpr size_t kAll = 0;  // StatType::AGGREGATE
  CudaAllocatorStats s;
  s.available = true;
  s.allocated_current = stats.allocated_bytes[kAll].current;
  s.allocated_peak = stats.allocated_bytes[kAll].peak;
  s.allocated_total = stats.allocated_bytes[kAll].allocated;
  s.freed_total = stats.allocated_bytes[kAll].freed;
  s.reserved_current = stats.reserved_bytes[kAll].current;
  s.reserved_peak = stats.reserved_bytes[kAll].peak;
  s.active_current = stats.active_bytes[kAll].current;
  s.active_peak = stats.active_bytes[kAll].peak;
  s.allocations_current = stats.allocation[kAll].current;
  s.allocations_total = stats.allocation[kAll].allocated;
  s.num_ooms = stats.num_ooms;
  s.num_alloc_retries = stats.num_alloc_retries;
  s.device_total = device_memory(device);
  return s;
}

void set_cuda_memory_limit(int device, int64_t bytes, const std::string& source) {
  const int64_t total = device_memory(device);
  ZS_REQUIRE(bytes <= total, ConfigError, "the memory limit (", source, ") is more than cuda:", device,
             " has (", total / 1048576, " MiB)");
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(bytes) / static_cast<double>(total),
                                                     static_cast<c10::DeviceIndex>(device));
}

void set_cuda_oom_observer(void (*observer)()) {
  c10::cuda::CUDACachingAllocator::attachOutOfMemoryObserver(
      [observer](int64_t, size_t, size_t, size_t) { observer(); });
}

std::vector<CudaBlock> largest_cuda_blocks(int device, size_t n) {
  std::vector<CudaBlock> out;
  const auto snap = c10::cuda::CUDACachingAllocator::snapshot();
  for (const auto& seg : snap.segments) {
    if (seg.device != device) continue;
    for (const auto& b : seg.blocks) {
      if (!b.allocated) continue;
      out.push_back({static_cast<int64_t>(b.size), static_cast<int64_t>(b.requested_size),
                     static_cast<int64_t>(seg.total_size), seg.is_large});
    }
  }
  std::sort(out.begin(), out.end(), [](const CudaBlock& a, const CudaBlock& b) { return a.bytes > b.bytes; });
  if (out.size() > n) out.resize(n);
  return out;
}

}  // namespace zeroshard::detail
