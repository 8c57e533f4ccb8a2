// SPDX-License-Identifier: Apache-2.0
// CPU-only LibTorch (e.g. Debian's libtorch 1.13): there is no current CUDA stream to order
// collectives against, so the NCCL backend cannot run; make_nccl_communicator refuses before any
// of these is needed. Device switching falls back to the CUDA runtime. See cuda_stream.h.
#include "cuda_stream.h"
#include "zeroshard/comm/check_cuda.h"
#include "zeroshard/base/error.h"

namespace zeroshard::comm {

bool torch_has_cuda() { return false; }

cudaStream_t current_cuda_stream(int device) {
  ZS_THROW(
      CommError, "the NCCL backend needs LibTorch's current CUDA stream on device ", device,
      ", but this build uses a LibTorch without CUDA (no c10_cuda). Rebuild zeroshard against a "
      "CUDA-enabled LibTorch (e.g. -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;"
      "print(torch.utils.cmake_prefix_path)')), or use the MPI backend with CPU tensors");
}

int exchange_cuda_device(int device) {
  int previous = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) ZS_CUDA_CHECK(cudaSetDevice(device));
  return previous;
}

void restore_cuda_device(int device) noexcept { (void)cudaSetDevice(device); }

}  // namespace zeroshard::comm
