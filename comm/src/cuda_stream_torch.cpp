// SPDX-License-Identifier: Apache-2.0
// LibTorch with CUDA: the current stream and device switching come from c10::cuda.
// See cuda_stream.h.
#include <c10/core/Device.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/impl/CUDAGuardImpl.h>
#include <c10/util/Exception.h>

#include "cuda_stream.h"
#include "zeroshard/base/error.h"

namespace zeroshard::comm {
namespace {

c10::Device cuda_device(int index) {
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

bool torch_has_cuda() { return true; }

cudaStream_t current_cuda_stream(int device) {
  try {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  } catch (const c10::Error& e) {
    ZS_THROW(CommError, "cannot get LibTorch's current CUDA stream on device ", device, ": ",
             e.what_without_backtrace());
  }
}

int exchange_cuda_device(int device) {
  try {
    // LibTorch 2.x: sets the device only when it differs (c10::cuda::ExchangeDevice).
    return c10::cuda::impl::CUDAGuardImpl().exchangeDevice(cuda_device(device)).index();
  } catch (const c10::Error& e) {
    ZS_THROW(CommError, "cannot make CUDA device ", device,
             " current: ", e.what_without_backtrace());
  }
}

void restore_cuda_device(int device) noexcept {
  // LibTorch 2.x: c10::cuda::MaybeSetDevice, which defers the switch when `device` has no context.
  c10::cuda::impl::CUDAGuardImpl().uncheckedSetDevice(cuda_device(device));
}

}  // namespace zeroshard::comm
