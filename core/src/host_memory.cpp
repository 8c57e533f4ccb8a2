// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/core/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "zeroshard/base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ZS_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define ZS_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define ZS_POISON(p, n) ((void)(p), (void)(n))
#define ZS_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

// LibTorch 2.3 made c10::Allocator::allocate non-const, with the pure virtual copy_data below
// (built against 1.13 and 2.6).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define ZS_ALLOCATE_CONST
#else
#define ZS_ALLOCATE_CONST const
#endif

namespace zeroshard {
namespace {

constexpr double kMiB = 1048576.0;

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{0};
std::atomic<int64_t> g_refused{0};

void raise_peak(int64_t now) {
  int64_t p = g_peak.load();
  while (now > p && !g_peak.compare_exchange_weak(p, now)) {
  }
}

// ---- phases ----
std::mutex g_phase_mutex;
std::deque<std::string>& phase_labels() {  // a deque: references stay valid as it grows
  static std::deque<std::string> labels{""};
  return labels;
}
std::unordered_map<std::string, int>& phase_ids() {
  static std::unordered_map<std::string, int> ids{{"", 0}};
  return ids;
}
thread_local int t_phase = 0;
std::atomic<int> g_last_phase{0};

// ---- live allocations ----
// LibTorch requires the CPU allocator to support raw_allocate (context == data pointer), so what
// is known about each allocation is kept in maps keyed by its pointer. The maps are striped by the
// pointer's hash, each under its own lock, so that threads allocating at once (the training
// thread, intra-op workers, data-loader and communicator threads) do not queue on one mutex; the
// counters beside them are atomics. Readers that need every allocation lock the stripes in turn.
struct Record {
  int64_t bytes;
  int phase;
  uint64_t sequence;
};
struct Stripe {
  std::mutex mu;
  std::unordered_map<void*, Record> live;
  // Totals of the allocations hashed here (summed when read): no shared counter per allocation.
  int64_t allocated_total = 0, freed_total = 0, allocations_total = 0;
};
constexpr size_t kStripes = 64;
std::array<Stripe, kStripes>& stripes() {
  static std::array<Stripe, kStripes> s;
  return s;
}
Stripe& stripe_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return stripes()[((a >> 6) ^ (a >> 14) ^ (a >> 22)) % kStripes];  // allocations are 64-byte aligned
}
template <typename Fn>
void for_each_live(Fn fn) {
  for (Stripe& st : stripes()) {
    std::lock_guard<std::mutex> lock(st.mu);
    for (const auto& [ptr, r] : st.live) fn(r);
  }
}
std::atomic<uint64_t> g_sequence{0};
// begin_host_memory_window(): allocations numbered after `g_window_start` count.
std::atomic<uint64_t> g_window_start{UINT64_MAX};
std::atomic<int64_t> g_window_current{0};
std::atomic<int64_t> g_window_peak{0};
std::mutex g_info_mutex;  // the two below (refusals and limits: off the allocation path)
HostRefusal g_refusal;
std::string g_limit_source;

void raise_window_peak(int64_t now) {
  int64_t p = g_window_peak.load();
  while (now > p && !g_window_peak.compare_exchange_weak(p, now)) {
  }
}

c10::DeleterFnPtr g_base_deleter = nullptr;
std::atomic<void (*)()> g_refusal_observer{nullptr};

// ---- the cache of freed blocks ----
// Blocks by size (each size's blocks oldest first) and by age (for eviction), under one lock that
// only allocations of kHostCacheMinBlock and more take. A lookup takes the most recently freed
// block of the exact size (its pages are the likeliest to be resident); eviction the oldest.
struct CachedBlock {
  int64_t bytes;
  void* ptr;
};
struct BlockCache {
  std::unordered_map<int64_t, std::deque<std::pair<uint64_t, void*>>> by_size;  // (tick, block)
  std::map<uint64_t, int64_t> by_tick;                                          // tick -> size
  uint64_t tick = 0;
};
std::mutex g_cache_mutex;
// Never destroyed: storages freed during static destruction still come here, and the blocks it
// holds at exit stay reachable (not leaks).
BlockCache& g_cache = *new BlockCache();  // under g_cache_mutex
std::atomic<int64_t> g_cached{0};
std::atomic<int64_t> g_cache_limit{0};
std::atomic<int64_t> g_cache_hits{0};

void free_blocks(const std::vector<CachedBlock>& blocks) {
  for (const CachedBlock& b : blocks) {
    ZS_UNPOISON(b.ptr, static_cast<size_t>(b.bytes));
    g_base_deleter(b.ptr);
  }
}

// Removes the oldest blocks until at most `keep` bytes stay cached; the caller frees them
// outside the lock.
void evict_locked(int64_t keep, std::vector<CachedBlock>* out) {
  while (!g_cache.by_tick.empty() && g_cached.load() > keep) {
    const auto oldest = g_cache.by_tick.begin();
    const int64_t bytes = oldest->second;
    auto same = g_cache.by_size.find(bytes);
    out->push_back({bytes, same->second.front().second});  // a size's oldest block is the oldest of all
    same->second.pop_front();
    if (same->second.empty()) g_cache.by_size.erase(same);
    g_cache.by_tick.erase(oldest);
    g_cached -= bytes;
  }
}

// Trims the cache to at most `keep` bytes.
void trim_cache(int64_t keep) {
  if (g_cached.load() <= keep) return;
  std::vector<CachedBlock> victims;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    evict_locked(keep, &victims);
  }
  free_blocks(victims);
}

// A cached block of exactly `bytes`, or nullptr.
void* take_cached(int64_t bytes) {
  if (bytes < kHostCacheMinBlock || g_cached.load(std::memory_order_relaxed) < bytes) return nullptr;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto same = g_cache.by_size.find(bytes);
    if (same == g_cache.by_size.end()) return nullptr;
    const auto [tick, block] = same->second.back();
    ptr = block;
    same->second.pop_back();
    if (same->second.empty()) g_cache.by_size.erase(same);
    g_cache.by_tick.erase(tick);
    g_cached -= bytes;
  }
  ++g_cache_hits;
  ZS_UNPOISON(ptr, static_cast<size_t>(bytes));
  return ptr;
}

// Keeps a freed block for reuse when it is large enough and fits under the cache's limit (and,
// with a memory limit in force, under that limit together with the live bytes); otherwise frees it.
void put_or_free(void* ptr, int64_t bytes) {
  const int64_t cache_limit = g_cache_limit.load(std::memory_order_relaxed);
  int64_t room = cache_limit;
  const int64_t memory_limit = g_limit.load(std::memory_order_relaxed);
  if (memory_limit > 0) room = std::min(room, memory_limit - g_current.load());
  if (bytes < kHostCacheMinBlock || bytes > room) {
    g_base_deleter(ptr);
    return;
  }
  std::vector<CachedBlock> victims;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    evict_locked(room - bytes, &victims);
    const uint64_t tick = ++g_cache.tick;
    g_cache.by_size[bytes].emplace_back(tick, ptr);
    g_cache.by_tick.emplace(tick, bytes);
    g_cached += bytes;
  }
  ZS_POISON(ptr, static_cast<size_t>(bytes));
  free_blocks(victims);
}

void release(void* ptr) {
  if (ptr == nullptr) return;
  int64_t bytes = 0;
  uint64_t sequence = 0;
  {
    Stripe& st = stripe_of(ptr);
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.live.find(ptr);
    if (it != st.live.end()) {
      bytes = it->second.bytes;
      sequence = it->second.sequence;
      st.live.erase(it);
      st.freed_total += bytes;
    }
  }
  if (bytes > 0 && sequence > g_window_start.load(std::memory_order_relaxed)) g_window_current -= bytes;
  g_current -= bytes;
  put_or_free(ptr, bytes);
}

[[noreturn]] void refuse(int64_t n, int64_t in_use, int64_t limit, const std::string& reason) {
  const int phase = current_memory_phase();
  {
    std::lock_guard<std::mutex> lock(g_info_mutex);
    g_refusal = {true, n, in_use, limit, phase, reason};
  }
  ++g_refused;
  if (auto* observer = g_refusal_observer.load()) observer();
  char sizes[160];
  std::snprintf(sizes, sizeof(sizes), "tried to allocate %.2f MiB of host memory with %.2f MiB in use", n / kMiB,
                in_use / kMiB);
  std::string msg = std::string("zeroshard: ") + sizes + ": " + reason;
  const std::string& label = memory_phase_label(phase);
  if (!label.empty()) msg += " (during " + label + ")";
  throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) ZS_ALLOCATE_CONST override {
    const int64_t bytes = static_cast<int64_t>(n);
    // Reserve first, so concurrent allocations cannot pass the limit together.
    const int64_t now = g_current.fetch_add(bytes) + bytes;
    const int64_t limit = g_limit.load();
    if (limit > 0 && now > limit) {
      g_current -= bytes;
      std::string source;
      {
        std::lock_guard<std::mutex> lock(g_info_mutex);
        source = g_limit_source;
      }
      char what[160];
      std::snprintf(what, sizeof(what), "that is over the limit of %.2f MiB", limit / kMiB);
      refuse(bytes, now - bytes, limit, std::string(what) + (source.empty() ? "" : " set by " + source));
    }
    void* data = take_cached(bytes);
    if (data == nullptr) data = allocate_fresh(n, bytes, now, limit);
    if (data == nullptr) {  // a zero-byte storage: nothing to track
      g_current -= bytes;
      return c10::DataPtr(data, data, &release, c10::Device(c10::DeviceType::CPU));
    }
    const uint64_t sequence = g_sequence.fetch_add(1, std::memory_order_relaxed) + 1;
    {
      Stripe& st = stripe_of(data);
      std::lock_guard<std::mutex> lock(st.mu);
      st.live[data] = Record{bytes, t_phase, sequence};
      st.allocated_total += bytes;
      ++st.allocations_total;
    }
    if (sequence > g_window_start.load(std::memory_order_relaxed)) raise_window_peak(g_window_current += bytes);
    raise_peak(now);
    return c10::DataPtr(data, data, &release, c10::Device(c10::DeviceType::CPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  // A block from the system allocator. With a memory limit in force the cache first gives back
  // what would take live + cached bytes over it; when the system allocator fails, the whole cache
  // goes back and the request is tried once more before it is refused.
  void* allocate_fresh(size_t n, int64_t bytes, int64_t now, int64_t limit) const {
    if (limit > 0) trim_cache(limit - now);
    for (int attempt = 0;; ++attempt) {
      try {
        c10::DataPtr inner = base_->allocate(n);
        void* data = inner.get();
        inner.release_context();  // ownership moves to our DataPtr; freed by release()
        return data;
      } catch (const c10::Error& e) {
        if (attempt == 0 && release_cached_host_memory() > 0) continue;
        g_current -= bytes;
        refuse(bytes, now - bytes, limit, std::string("the system allocator failed: ") + e.what_without_backtrace());
      }
    }
  }

 public:
  // LibTorch >= 2.3 declares this pure virtual; older versions do not have it (hence no override).
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  c10::Allocator* base_;
};

std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

}  // namespace

void install_host_memory_tracking() {
  std::call_once(g_install_once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    g_base_deleter = base->raw_deleter();
    // The wrapped allocator must free by data pointer alone; LibTorch's default CPU allocator does.
    if (g_base_deleter == nullptr) return;
    static TrackingAllocator tracking(base);
    c10::SetCPUAllocator(&tracking, /*priority=*/100);
    g_installed = true;
  });
}

bool host_memory_tracking_installed() { return g_installed.load(); }

HostMemoryStats host_memory_stats() {
  HostMemoryStats s;
  s.current = g_current.load();
  s.peak = g_peak.load();
  s.limit = g_limit.load();
  s.refused = g_refused.load();
  s.cached = g_cached.load();
  s.cache_limit = g_cache_limit.load();
  s.cache_hits = g_cache_hits.load();
  for (Stripe& st : stripes()) {
    std::lock_guard<std::mutex> lock(st.mu);
    s.allocations += static_cast<int64_t>(st.live.size());
    s.allocated_total += st.allocated_total;
    s.freed_total += st.freed_total;
    s.allocations_total += st.allocations_total;
  }
  return s;
}

void reset_host_memory_peak() { g_peak = g_current.load(); }

void begin_host_memory_window() {
  // Allocations racing with this call may count or not; the window is for a phase that follows.
  g_window_current = 0;
  g_window_peak = 0;
  g_window_start = g_sequence.load();
}

int64_t host_memory_window_peak() { return g_window_peak.load(); }

void set_host_memory_limit(int64_t bytes, const std::string& source) {
  ZS_REQUIRE(bytes >= 0, UsageError, "host memory limit must be >= 0 bytes, got ", bytes);
  ZS_REQUIRE(bytes == 0 || host_memory_tracking_installed(), UsageError,
             "a host memory limit (", source, ") needs the tracking allocator: call install_host_memory_tracking() "
             "first (LibTorch's CPU allocator frees by context here, so it cannot be wrapped)");
  {
    std::lock_guard<std::mutex> lock(g_info_mutex);
    g_limit_source = source;
  }
  g_limit = bytes;
}

void set_host_memory_cache_limit(int64_t bytes, const std::string& source) {
  ZS_REQUIRE(bytes >= 0, UsageError, source, ": the host memory cache limit must be >= 0 bytes, got ", bytes);
  ZS_REQUIRE(bytes == 0 || host_memory_tracking_installed(), UsageError, source,
             ": a cache of freed host blocks needs the tracking allocator: call install_host_memory_tracking() first");
  g_cache_limit = bytes;
  trim_cache(bytes);
}

int64_t release_cached_host_memory() {
  std::vector<CachedBlock> blocks;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    evict_locked(0, &blocks);
  }
  free_blocks(blocks);
  int64_t bytes = 0;
  for (const CachedBlock& b : blocks) bytes += b.bytes;
  return bytes;
}

std::string host_memory_limit_source() {
  std::lock_guard<std::mutex> lock(g_info_mutex);
  return g_limit > 0 ? g_limit_source : std::string();
}

int memory_phase_id(const std::string& label) {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  auto [it, inserted] = phase_ids().emplace(label, static_cast<int>(phase_labels().size()));
  if (inserted) phase_labels().push_back(label);
  return it->second;
}

void set_memory_phase(int id) {
  t_phase = id;
  if (id != 0) g_last_phase.store(id, std::memory_order_relaxed);
}

int current_memory_phase() { return t_phase; }

const std::string& memory_phase_label(int id) {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  if (id < 0 || static_cast<size_t>(id) >= phase_labels().size()) return phase_labels()[0];
  return phase_labels()[static_cast<size_t>(id)];
}

int last_memory_phase() { return g_last_phase.load(std::memory_order_relaxed); }

std::vector<HostAllocation> largest_host_allocations(size_t n) {
  std::vector<HostAllocation> all;
  for_each_live([&](const Record& r) { all.push_back({r.bytes, r.phase, r.sequence}); });
  auto larger = [](const HostAllocation& a, const HostAllocation& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.sequence < b.sequence;
  };
  const size_t k = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), larger);
  all.resize(k);
  return all;
}

std::vector<HostPhaseTotal> host_allocations_by_phase() {
  std::map<int, HostPhaseTotal> by;
  for_each_live([&](const Record& r) {
    HostPhaseTotal& t = by[r.phase];
    t.phase = r.phase;
    t.bytes += r.bytes;
    ++t.count;
  });
  std::vector<HostPhaseTotal> out;
  for (const auto& [phase, t] : by) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const HostPhaseTotal& a, const HostPhaseTotal& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.phase < b.phase;
  });
  return out;
}

void set_host_refusal_observer(void (*observer)()) { g_refusal_observer = observer; }

HostRefusal last_host_refusal() {
  std::lock_guard<std::mutex> lock(g_info_mutex);
  return g_refusal;
}

}  // namespace zeroshard
