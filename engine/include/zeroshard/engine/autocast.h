// SPDX-License-Identifier: Apache-2.0
#pragma once
// AutocastGuard: LibTorch autocast for a scope (torch.autocast in C++), on CPU (bf16) or CUDA
// (fp16/bf16): eligible ops (matmuls, linear, conv) run in `dtype` while parameters stay fp32.
// Restores the previous autocast state on destruction and clears the cast cache when the outermost
// guard ends. Works with LibTorch 1.13 and 2.x (whose autocast API changed). Not thread-safe
// across threads (autocast state is thread-local, as in LibTorch).

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

namespace zeroshard {

// The autocast dtype in force on this thread for `device` (CPU or CUDA), or nullopt when autocast
// is off there.
c10::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device);

class AutocastGuard {
 public:
  // Throws UsageError for a device type other than CPU/CUDA, or a dtype autocast does not support
  // there (CPU: BFloat16; CUDA: Half or BFloat16). `cache_casts` false turns off LibTorch's cache
  // of low-precision weight copies for the scope (and restores it after): the cache keeps every
  // weight's copy alive until the outermost autocast scope ends, which under sharding is every
  // unit's copy through the whole forward. Each use then casts its weight again.
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool cache_casts = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_cache_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

}  // namespace zeroshard
