// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/engine/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "zeroshard/base/error.h"

// LibTorch 2.4 replaced the per-device autocast setters with device-type arguments.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define ZS_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define ZS_AUTOCAST_BY_DEVICE_TYPE 0
#endif

namespace zeroshard {
namespace {

bool enabled(c10::DeviceType d) {
#if ZS_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(d);
#else
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

c10::ScalarType dtype_of(c10::DeviceType d) {
#if ZS_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(d);
#else
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

void set(c10::DeviceType d, bool on, c10::ScalarType dtype) {
#if ZS_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(d, dtype);
  at::autocast::set_autocast_enabled(d, on);
#else
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  }
#endif
}

}  // namespace

c10::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device) {
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) return c10::nullopt;
  if (!enabled(device)) return c10::nullopt;
  return dtype_of(device);
}

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool cache_casts) : device_(device) {
  ZS_REQUIRE(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA, UsageError,
             "autocast supports CPU and CUDA, not ", c10::DeviceTypeName(device));
  ZS_REQUIRE(dtype == c10::kBFloat16 || (device == c10::DeviceType::CUDA && dtype == c10::kHalf), UsageError,
             "autocast on ", c10::DeviceTypeName(device), " runs in ",
             device == c10::DeviceType::CPU ? "BFloat16" : "Half or BFloat16", ", not ", c10::toString(dtype));
  prev_enabled_ = enabled(device);
  prev_dtype_ = dtype_of(device);
  prev_cache_ = at::autocast::is_autocast_cache_enabled();
  set(device, true, dtype);
  at::autocast::set_autocast_cache_enabled(prev_cache_ && cache_casts);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_cache_enabled(prev_cache_);
  set(device_, prev_enabled_, prev_dtype_);
}

}  // namespace zeroshard
