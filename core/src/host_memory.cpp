#include "zeroshard/core/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace zeroshard {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void count(int64_t delta) {
  const int64_t now = g_current.fetch_add(delta) + delta;
  int64_t p = g_peak.load();
  while (now > p && !g_peak.compare_exchange_weak(p, now)) {
  }
}

// LibTorch requires the CPU allocator to support raw_allocate (context == data pointer), so the
// size of each allocation is kept in a map keyed by its pointer.
std::mutex g_sizes_mutex;
std::unordered_map<void*, int64_t>& sizes() {
  static std::unordered_map<void*, int64_t> m;
  return m;
}
c10::DeleterFnPtr g_base_deleter = nullptr;

void release(void* ptr) {
  if (ptr == nullptr) return;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    auto it = sizes().find(ptr);
    if (it != sizes().end()) {
      bytes = it->second;
      sizes().erase(it);
    }
  }
  count(-bytes);
  g_base_deleter(ptr);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    inner.release_context();  // ownership moves to our DataPtr; freed by release()
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(g_sizes_mutex);
      sizes()[data] = static_cast<int64_t>(n);
    }
    count(static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

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

HostMemoryStats host_memory_stats() { return {g_current.load(), g_peak.load()}; }

void reset_host_memory_peak() { g_peak = g_current.load(); }

}  // namespace zeroshard
