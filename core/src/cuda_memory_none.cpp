// SPDX-License-Identifier: Apache-2.0
#include "cuda_memory.h"

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

void activate_cuda_device(int device) {
  ZS_THROW(ConfigError, "the device resolved to cuda:", device,
           " but zs_core was built without CUDA support (a CPU-only LibTorch, or no NCCL/CUDA toolkit at "
           "configure time); choose the device CPU or rebuild against a CUDA LibTorch");
}

std::string cuda_device_pci_id(int) { return {}; }

CudaAllocatorStats cuda_allocator_stats(int) { return {}; }

void set_cuda_memory_limit(int device, int64_t, const std::string& source) {
  ZS_THROW(ConfigError, source, " on cuda:", device,
           " needs a CUDA-enabled LibTorch; this build's LibTorch has no CUDA allocator");
}

void set_cuda_oom_observer(void (*)()) {}

std::vector<CudaBlock> largest_cuda_blocks(int, size_t) { return {}; }

}  // namespace zeroshard::detail
