#include "zeroshard/core/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "zeroshard/base/error.h"

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
std::atomic<int64_t> g_allocated_total{0};
std::atomic<int64_t> g_freed_total{0};
std::atomic<int64_t> g_allocations_total{0};
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
// is known about each allocation is kept in a map keyed by its pointer.
struct Record {
  int64_t bytes;
  int phase;
  uint64_t sequence;
};
std::mutex g_live_mutex;
std::unordered_map<void*, Record>& live() {
  static std::unordered_map<void*, Record> m;
  return m;
}
uint64_t g_sequence = 0;  // under g_live_mutex
// begin_host_memory_window(): allocations after `g_window_start` count. Under g_live_mutex.
uint64_t g_window_start = UINT64_MAX;
int64_t g_window_current = 0;
int64_t g_window_peak = 0;
HostRefusal g_refusal;    // under g_live_mutex
std::string g_limit_source;  // under g_live_mutex

c10::DeleterFnPtr g_base_deleter = nullptr;
std::atomic<void (*)()> g_refusal_observer{nullptr};

void release(void* ptr) {
  if (ptr == nullptr) return;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    auto it = live().find(ptr);
    if (it != live().end()) {
      bytes = it->second.bytes;
      if (it->second.sequence > g_window_start) g_window_current -= bytes;
      live().erase(it);
    }
  }
  g_current -= bytes;
  g_freed_total += bytes;
  g_base_deleter(ptr);
}

[[noreturn]] void refuse(int64_t n, int64_t in_use, int64_t limit, const std::string& reason) {
  const int phase = current_memory_phase();
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
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
        std::lock_guard<std::mutex> lock(g_live_mutex);
        source = g_limit_source;
      }
      char what[160];
      std::snprintf(what, sizeof(what), "that is over the limit of %.2f MiB", limit / kMiB);
      refuse(bytes, now - bytes, limit, std::string(what) + (source.empty() ? "" : " set by " + source));
    }
    c10::DataPtr inner;
    try {
      inner = base_->allocate(n);
    } catch (const c10::Error& e) {
      g_current -= bytes;
      refuse(bytes, now - bytes, limit, std::string("the system allocator failed: ") + e.what_without_backtrace());
    }
    void* data = inner.get();
    const c10::Device device = inner.device();
    inner.release_context();  // ownership moves to our DataPtr; freed by release()
    if (data == nullptr) {  // a zero-byte storage: nothing to track
      g_current -= bytes;
      return c10::DataPtr(data, data, &release, device);
    }
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      live()[data] = Record{bytes, t_phase, ++g_sequence};
      if (g_sequence > g_window_start) {
        g_window_current += bytes;
        g_window_peak = std::max(g_window_peak, g_window_current);
      }
    }
    g_allocated_total += bytes;
    ++g_allocations_total;
    raise_peak(now);
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

HostMemoryStats host_memory_stats() {
  HostMemoryStats s;
  s.current = g_current.load();
  s.peak = g_peak.load();
  s.allocated_total = g_allocated_total.load();
  s.freed_total = g_freed_total.load();
  s.allocations_total = g_allocations_total.load();
  s.limit = g_limit.load();
  s.refused = g_refused.load();
  std::lock_guard<std::mutex> lock(g_live_mutex);
  s.allocations = static_cast<int64_t>(live().size());
  return s;
}

void reset_host_memory_peak() { g_peak = g_current.load(); }

void begin_host_memory_window() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_window_start = g_sequence;
  g_window_current = 0;
  g_window_peak = 0;
}

int64_t host_memory_window_peak() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  return g_window_peak;
}

void set_host_memory_limit(int64_t bytes, const std::string& source) {
  ZS_REQUIRE(bytes >= 0, UsageError, "host memory limit must be >= 0 bytes, got ", bytes);
  ZS_REQUIRE(bytes == 0 || host_memory_tracking_installed(), UsageError,
             "a host memory limit (", source, ") needs the tracking allocator: call install_host_memory_tracking() "
             "first (LibTorch's CPU allocator frees by context here, so it cannot be wrapped)");
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_limit_source = source;
  }
  g_limit = bytes;
}

std::string host_memory_limit_source() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
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
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    all.reserve(live().size());
    for (const auto& [ptr, r] : live()) all.push_back({r.bytes, r.phase, r.sequence});
  }
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
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    for (const auto& [ptr, r] : live()) {
      HostPhaseTotal& t = by[r.phase];
      t.phase = r.phase;
      t.bytes += r.bytes;
      ++t.count;
    }
  }
  std::vector<HostPhaseTotal> out;
  for (const auto& [phase, t] : by) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const HostPhaseTotal& a, const HostPhaseTotal& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.phase < b.phase;
  });
  return out;
}

void set_host_refusal_observer(void (*observer)()) { g_refusal_observer = observer; }

HostRefusal last_host_refusal() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  return g_refusal;
}

}  // namespace zeroshard
