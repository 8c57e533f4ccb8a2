#pragma once
// Page-locked host buffers for offloaded state and NVMe staging, reused across steps.
//
// With CUDA available, blocks come from LibTorch's pinned (cudaHostAlloc) allocator, so H2D/D2H
// copies from them are asynchronous. Without CUDA, blocks are page-aligned (kDirectAlignment, so
// O_DIRECT I/O can use them) and mlock'd; if the memlock limit refuses, the pool logs one warning
// naming `ulimit -l` and the limit, and continues with unlocked memory (mode() says so).
// pin=false: plain aligned memory, no locking.
// Freed tensors return their block to the pool (by size class: the request rounded up to a power
// of two, at least 64 KiB) and later requests of that class reuse it. Bytes held by the pool are
// reported to `mem` (category kPinnedHost) if given. Thread-safe. The pool must outlive the
// tensors it hands out (checked: destroying it with blocks in use is a fatal error message).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zeroshard {

class MemoryStats;

class PinnedPool {
 public:
  explicit PinnedPool(bool pin = true, MemoryStats* mem = nullptr);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A contiguous CPU tensor of `numel` elements of `dtype` (contents uninitialised), whose
  // data_ptr is kDirectAlignment-aligned.
  at::Tensor empty(int64_t numel, c10::ScalarType dtype);

  int64_t bytes_reserved() const;  // held by the pool (in use + cached)
  int64_t bytes_in_use() const;
  int64_t blocks_reused() const;   // requests served from the cache
  // "cuda-pinned", "mlock", "unlocked (mlock refused: ...)", or "unpinned (pin_memory=false)".
  std::string mode() const;
  // Returns cached (unused) blocks to the system.
  void release_cached();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace zeroshard
