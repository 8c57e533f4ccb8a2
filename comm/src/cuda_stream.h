// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bridge between the NCCL backend and LibTorch's CUDA streams. Private to zs_core.
//
// The NCCL backend orders its collectives after the work the caller has queued on LibTorch's
// *current* CUDA stream, and makes that stream wait for results (Work::wait). Which stream is
// current is LibTorch state (c10::cuda), so this is the only place that needs a CUDA LibTorch.
// Switching the current device also goes through LibTorch when it has CUDA, because LibTorch 2.x
// restores a previous device without creating a CUDA context on it (a plain cudaSetDevice on
// CUDA 12+ creates one: a watchdog thread polling device 3 would otherwise grow a context on 0).
// Two implementations, chosen at configure time (core/CMakeLists.txt, ZS_TORCH_HAS_CUDA):
//   cuda_stream_torch.cpp  LibTorch with CUDA (c10_cuda): the real thing.
//   cuda_stream_none.cpp   CPU-only LibTorch: torch_has_cuda() is false and
//                          current_cuda_stream() throws CommError.
// Thread-safe: LibTorch's current stream is per thread and per device.

#include <cuda_runtime.h>

namespace zeroshard::comm {

// True when this build's LibTorch carries CUDA (a build-time fact, not whether a GPU is present).
bool torch_has_cuda();

// LibTorch's current CUDA stream on `device` for the calling thread (the default stream unless the
// caller set another one, e.g. with a CUDAStreamGuard). Throws CommError on a CPU-only LibTorch.
cudaStream_t current_cuda_stream(int device);

// Makes `device` the calling thread's current CUDA device; returns the previous one. Throws
// CudaError (CommError on failures reported by LibTorch).
int exchange_cuda_device(int device);
// Makes `device` current again (lazily, where LibTorch supports it). Never throws.
void restore_cuda_device(int device) noexcept;

// RAII over the two functions above.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) : device_(device), previous_(exchange_cuda_device(device)) {}
  ~CudaDeviceGuard() {
    if (previous_ != device_) restore_cuda_device(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int device_;
  int previous_;
};

}  // namespace zeroshard::comm
