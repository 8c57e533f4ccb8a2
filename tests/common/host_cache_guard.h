// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sets the host memory cache's limit for a test and restores the Session's when it ends (whatever
// happened), starting and ending with an empty cache and no host memory limit.

#include <cstdint>

#include "zeroshard/core/host_memory.h"

namespace zeroshard::test {

struct CacheGuard {
  int64_t saved = host_memory_stats().cache_limit;
  explicit CacheGuard(int64_t bytes) {
    release_cached_host_memory();
    set_host_memory_cache_limit(bytes, "test");
  }
  ~CacheGuard() {
    set_host_memory_limit(0, "");
    release_cached_host_memory();
    set_host_memory_cache_limit(saved, "test");
  }
  CacheGuard(const CacheGuard&) = delete;
  CacheGuard& operator=(const CacheGuard&) = delete;
};

}  // namespace zeroshard::test
