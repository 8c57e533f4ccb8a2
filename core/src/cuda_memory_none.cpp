#include "cuda_memory.h"

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

CudaAllocatorStats cuda_allocator_stats(int) { return {}; }

void set_cuda_memory_limit(int device, int64_t) {
  ZS_THROW(ConfigError, "memory.limit_mib on cuda:", device,
           " needs a CUDA-enabled LibTorch; this build's LibTorch has no CUDA allocator");
}

void set_cuda_oom_observer(void (*)()) {}

std::vector<CudaBlock> largest_cuda_blocks(int, size_t) { return {}; }

}  // namespace zeroshard::detail
