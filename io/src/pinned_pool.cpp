// SPDX-License-Identifier: Apache-2.0
// PinnedPool: size-classed cache of page-locked host blocks. The state lives in a shared_ptr that
// every handed-out tensor's DataPtr context holds, so a block can always find its way back (to the
// cache while the pool lives, to the system after). System calls that may take long (allocating
// and mlock'ing a new block faults in every page) run outside the mutex.

#include "zeroshard/io/pinned_pool.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

namespace {

enum class Mode { kCudaPinned, kMlock, kUnlocked, kUnpinned };

struct Block {
  void* ptr = nullptr;
  int64_t bytes = 0;    // the size class
  bool locked = false;  // mlock'd by us (munlock on release)
  at::Tensor holder;    // cuda-pinned mode: the LibTorch allocation that owns ptr
};

// Returns a block to the system. Never throws (called from tensor deleters).
void free_block(Block& b) noexcept {
  if (b.holder.defined()) {
    b.holder = at::Tensor();  // back to LibTorch's pinned allocator
  } else if (b.ptr != nullptr) {
    if (b.locked) munlock(b.ptr, static_cast<size_t>(b.bytes));
    std::free(b.ptr);
  }
  b.ptr = nullptr;
}

// "65536 bytes (64 KiB)": `ulimit -l` shows KiB.
std::string limit_text(rlim_t v) {
  if (v == RLIM_INFINITY) return "unlimited";
  return std::to_string(v) + " bytes (" + std::to_string(v / 1024) + " KiB)";
}

}  // namespace

struct PinnedPool::State {
  State(bool pin_memory, MemoryStats* stats)
      : mode(!pin_memory ? Mode::kUnpinned
                         : at::globalContext().hasCUDA() ? Mode::kCudaPinned : Mode::kMlock),
        mem(stats) {}

  // A block of class `bytes`: from the cache, else from the system (releasing the cache and
  // retrying once if the system is out of memory).
  Block take(int64_t bytes);
  // Called by a tensor's deleter, on any thread.
  void give_back(Block b) noexcept;
  // Takes every cached block out of the pool (and out of `mem`); the caller frees them.
  std::vector<Block> drain_cache();

  // A new block from the system; throws Error on failure. A refused mlock is not a failure: it
  // switches the pool to kUnlocked (note_refusal) and returns the block unlocked.
  Block allocate(int64_t bytes);
  void note_refusal(int err, int64_t bytes);

  mutable std::mutex mu;
  Mode mode;                  // guarded by mu
  std::string refusal;        // kUnlocked: why
  MemoryStats* mem;           // null once the pool is destroyed
  bool open = true;           // false once the pool is destroyed: returned blocks are freed
  std::map<int64_t, std::vector<Block>> cache;  // size class -> free blocks (LIFO)
  int64_t reserved = 0, in_use = 0, reused = 0;
};

namespace {

// What a handed-out tensor's DataPtr holds: the block and the state it goes back to.
struct Lease {
  std::shared_ptr<PinnedPool::State> state;
  Block block;
  static void release(void* ctx) noexcept {
    std::unique_ptr<Lease> lease(static_cast<Lease*>(ctx));
    lease->state->give_back(std::move(lease->block));
  }
};

}  // namespace

void PinnedPool::State::note_refusal(int err, int64_t bytes) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (mode != Mode::kMlock) return;  // another thread got here first: one warning only
    mode = Mode::kUnlocked;
    refusal = detail::errno_string(err) + "; RLIMIT_MEMLOCK " + limit_text(lim.rlim_cur) +
              ", asked " + std::to_string(bytes) + " bytes";
  }
  ZS_LOG(kWarn) << "PinnedPool: mlock of " << bytes << " bytes refused (" << detail::errno_string(err)
                << "); the memlock limit (RLIMIT_MEMLOCK, `ulimit -l`) is " << limit_text(lim.rlim_cur)
                << " (hard limit " << limit_text(lim.rlim_max)
                << "). Continuing with unlocked host memory: offloaded state may be paged out and "
                   "host-device copies are not page-locked. To pin, raise the limit (`ulimit -l "
                   "unlimited` in the job script, `docker run --ulimit memlock=-1`, or memlock in "
                   "/etc/security/limits.conf); offload.pin_memory = false asks for unlocked memory "
                   "without this warning.";
}

Block PinnedPool::State::allocate(int64_t bytes) {
  Mode m;
  {
    std::lock_guard<std::mutex> lock(mu);
    m = mode;
  }
  Block b;
  b.bytes = bytes;
  if (m == Mode::kCudaPinned) {
    const auto pinned = at::TensorOptions().dtype(at::kByte).pinned_memory(true);
    b.holder = at::empty({bytes}, pinned);
    auto addr = reinterpret_cast<uintptr_t>(b.holder.data_ptr());
    if (addr % kDirectAlignment != 0) {
      // LibTorch 2.x's pinned cache may hand out a block at an offset inside a larger one (torch
      // 2.11 gave 0x...600 for 64 KiB): take one alignment unit more and start at its boundary.
      b.holder = at::empty({bytes + kDirectAlignment}, pinned);
      addr = reinterpret_cast<uintptr_t>(b.holder.data_ptr());
      addr = (addr + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
    }
    b.ptr = reinterpret_cast<void*>(addr);
    return b;
  }
  const int rc = posix_memalign(&b.ptr, static_cast<size_t>(kDirectAlignment), static_cast<size_t>(bytes));
  if (rc != 0) {
    b.ptr = nullptr;
    ZS_THROW(Error, "PinnedPool: cannot allocate a host block of ", bytes, " bytes: ",
             detail::errno_string(rc));
  }
  if (m != Mode::kMlock) return b;
  if (mlock(b.ptr, static_cast<size_t>(bytes)) == 0) {
    b.locked = true;
    return b;
  }
  const int err = errno;
  if (err == EPERM || err == ENOMEM || err == EAGAIN) {
    note_refusal(err, bytes);
    return b;
  }
  std::free(b.ptr);
  ZS_THROW(Error, "PinnedPool: mlock of ", bytes, " bytes failed: ", detail::errno_string(err));
}

Block PinnedPool::State::take(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(bytes);
    if (it != cache.end() && !it->second.empty()) {
      Block b = std::move(it->second.back());
      it->second.pop_back();
      in_use += bytes;
      ++reused;
      return b;
    }
  }
  Block b;
  try {
    b = allocate(bytes);
  } catch (const std::exception&) {
    // Out of memory (or pinned memory): give the cache back and try once more.
    std::vector<Block> cached = drain_cache();
    if (cached.empty()) throw;
    for (Block& c : cached) free_block(c);
    b = allocate(bytes);
  }
  std::lock_guard<std::mutex> lock(mu);
  reserved += bytes;
  in_use += bytes;
  if (mem != nullptr) mem->add(MemCategory::kPinnedHost, bytes);
  return b;
}

void PinnedPool::State::give_back(Block b) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu);
    in_use -= b.bytes;
    if (open) {
      try {
        cache[b.bytes].push_back(std::move(b));
        return;
      } catch (...) {  // no memory for the cache entry: free the block instead
        if (mem != nullptr) mem->sub(MemCategory::kPinnedHost, b.bytes);
      }
    }
    reserved -= b.bytes;  // when closed: not in `mem` any more (taken out by ~PinnedPool)
  }
  free_block(b);
}

std::vector<Block> PinnedPool::State::drain_cache() {
  std::vector<Block> out;
  std::lock_guard<std::mutex> lock(mu);
  int64_t bytes = 0;
  for (auto& [cls, blocks] : cache) {
    for (Block& b : blocks) {
      bytes += b.bytes;
      out.push_back(std::move(b));
    }
  }
  cache.clear();
  reserved -= bytes;
  if (mem != nullptr && bytes != 0) mem->sub(MemCategory::kPinnedHost, bytes);
  return out;
}

// ---- PinnedPool ----

PinnedPool::PinnedPool(bool pin, MemoryStats* mem) : state_(std::make_shared<State>(pin, mem)) {}

PinnedPool::~PinnedPool() {
  std::vector<Block> cached = state_->drain_cache();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->open = false;
    if (state_->mem != nullptr && state_->in_use != 0) {
      state_->mem->sub(MemCategory::kPinnedHost, state_->in_use);
    }
    state_->mem = nullptr;
    if (state_->in_use != 0) {
      ZS_LOG(kDebug) << "PinnedPool destroyed with " << state_->in_use
                     << " bytes in use; those blocks are freed when their tensors are";
    }
  }
  for (Block& b : cached) free_block(b);
}

int64_t PinnedPool::size_class(int64_t bytes) {
  ZS_REQUIRE(bytes >= 0 && bytes <= (int64_t{1} << 62), UsageError, "PinnedPool: a request of ",
             bytes, " bytes is outside [0, 2^62]");
  int64_t cls = kMinBlockBytes;
  while (cls < bytes) cls <<= 1;
  return cls;
}

at::Tensor PinnedPool::empty(int64_t numel, c10::ScalarType dtype) {
  ZS_REQUIRE(dtype != c10::ScalarType::Undefined, UsageError,
             "PinnedPool::empty: dtype is Undefined; pass a concrete dtype such as Float");
  ZS_REQUIRE(numel >= 0, UsageError, "PinnedPool::empty: numel = ", numel, " is negative");
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  ZS_REQUIRE(numel <= (int64_t{1} << 62) / item, UsageError, "PinnedPool::empty: ", numel,
             " elements of ", c10::toString(dtype), " exceed 2^62 bytes");
  const int64_t cls = size_class(numel * item);
  auto lease = std::make_unique<Lease>();
  lease->state = state_;
  lease->block = state_->take(cls);
  void* ptr = lease->block.ptr;
  // From here the lease (and so the block) belongs to the tensor, or, if make_tensor throws, to
  // the maker's context, which returns it to the pool.
  return at::for_blob(ptr, {numel})
      .context(lease.release(), &Lease::release)
      .options(at::TensorOptions().dtype(dtype).device(at::kCPU))
      .make_tensor();
}

int64_t PinnedPool::bytes_reserved() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reserved;
}

int64_t PinnedPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->in_use;
}

int64_t PinnedPool::blocks_reused() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reused;
}

std::string PinnedPool::mode() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  switch (state_->mode) {
    case Mode::kCudaPinned: return "cuda-pinned";
    case Mode::kMlock: return "mlock";
    case Mode::kUnlocked: return "unlocked (mlock refused: " + state_->refusal + ")";
    case Mode::kUnpinned: return "unpinned (pin_memory=false)";
  }
  return "?";
}

void PinnedPool::release_cached() {
  std::vector<Block> cached = state_->drain_cache();
  for (Block& b : cached) free_block(b);
}

}  // namespace zeroshard
