// SPDX-License-Identifier: Apache-2.0
#pragma once
// Page-locked host buffers for offloaded state and NVMe staging, reused across steps.
//
// With CUDA available at run time (at::globalContext().hasCUDA()), blocks come from LibTorch's
// pinned allocator (cudaHostAlloc, through at::empty(..., pinned_memory(true))), so H2D/D2H copies
// from them are asynchronous; a block LibTorch hands out off a kDirectAlignment boundary (torch
// 2.11 does for small sizes) is asked again one alignment unit larger and used from its boundary.
// Without CUDA, blocks are page-aligned (kDirectAlignment, aio.h, so O_DIRECT I/O can use them)
// and mlock'd; if mlock is refused (EPERM, ENOMEM or EAGAIN: the memlock limit), the pool logs
// one warning naming `ulimit -l`, the limit and the bytes asked, and from then on hands out
// unlocked memory (mode() says so; blocks locked before stay locked).
// pin=false: plain aligned memory, no locking.
// Freed tensors return their block to the pool (by size class: the request rounded up to a power
// of two, at least kMinBlockBytes) and later requests of that class reuse it (LIFO). Bytes held by
// the pool (in use + cached, whole blocks) are reported to `mem` (category kPinnedHost) if given.
// Thread-safe: empty(), the queries and release_cached() may be called from any thread, and tensors
// may be freed on any thread.
// Asynchronous copies: a block goes back to the cache as soon as its last tensor is freed; unlike
// LibTorch's own pinned cache, the pool records no CUDA events. Keep a tensor (or synchronize its
// stream) until every non_blocking copy from or to it has completed.
//
// Lifetime: the pool's state is shared with the tensors it hands out, so the pool may be destroyed
// while tensors from it are alive. Destroying it frees the cached blocks and takes every block's
// bytes out of `mem` (so `mem` need only outlive the pool, not the tensors); blocks still in use
// are then freed (munlock + free) when their last tensor dies.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zeroshard/io/aio.h"  // kDirectAlignment

namespace zeroshard {

class MemoryStats;

class PinnedPool {
 public:
  // Smallest size class; every block is a power of two of at least this many bytes.
  static constexpr int64_t kMinBlockBytes = int64_t{64} << 10;

  explicit PinnedPool(bool pin = true, MemoryStats* mem = nullptr);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A contiguous CPU tensor of `numel` elements of `dtype` (contents uninitialised), whose
  // data_ptr is kDirectAlignment-aligned. numel = 0 still takes a block of the smallest class.
  // Throws UsageError for numel < 0, an undefined dtype or a size over 2^62 bytes, and Error
  // naming the bytes when the system has no memory for a new block (after releasing the cache).
  at::Tensor empty(int64_t numel, c10::ScalarType dtype);

  int64_t bytes_reserved() const;  // held by the pool (in use + cached)
  int64_t bytes_in_use() const;
  int64_t blocks_reused() const;   // requests served from the cache
  // "cuda-pinned", "mlock", "unlocked (mlock refused: ...)", or "unpinned (pin_memory=false)".
  std::string mode() const;
  // Returns cached (unused) blocks to the system (in cuda-pinned mode: to LibTorch's pinned
  // allocator, which keeps its own cache).
  void release_cached();

  // The size class serving a request of `bytes`: max(kMinBlockBytes, next power of two).
  static int64_t size_class(int64_t bytes);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace zeroshard
