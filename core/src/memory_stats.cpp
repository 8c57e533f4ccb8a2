// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/core/memory_stats.h"

#include <cstdio>
#include <sstream>

namespace zeroshard {

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::kShardedParams: return "sharded params";
    case MemCategory::kGatheredParams: return "gathered params";
    case MemCategory::kGradShards: return "gradient shards";
    case MemCategory::kGradBuffers: return "unsharded grads";
    case MemCategory::kOptimizerState: return "optimizer state";
    case MemCategory::kCommBuffers: return "comm buffers";
    case MemCategory::kOffloadHost: return "offloaded to host";
    case MemCategory::kPinnedHost: return "pinned staging";
    case MemCategory::kNvme: return "on NVMe (disk)";
    case MemCategory::kCount: break;
  }
  return "?";
}

namespace {

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t p = peak.load();
  while (value > p && !peak.compare_exchange_weak(p, value)) {
  }
}

}  // namespace

void MemoryStats::update_peaks(MemCategory c) {
  const int64_t now = current_[idx(c)].load();
  raise_to(peak_[idx(c)], now);
  raise_to(window_peak_[idx(c)], now);
  raise_to(total_peak_, total_current());
}

void MemoryStats::add(MemCategory c, int64_t bytes) {
  current_[idx(c)] += bytes;
  update_peaks(c);
}

void MemoryStats::sub(MemCategory c, int64_t bytes) { current_[idx(c)] -= bytes; }

void MemoryStats::set(MemCategory c, int64_t bytes) {
  current_[idx(c)] = bytes;
  update_peaks(c);
}

int64_t MemoryStats::persistent() const {
  return current(MemCategory::kShardedParams) + current(MemCategory::kGradShards) +
         current(MemCategory::kOptimizerState) + current(MemCategory::kOffloadHost);
}

int64_t MemoryStats::total_current() const {
  int64_t t = 0;
  for (size_t i = 0; i < kN; ++i) {
    if (i != idx(MemCategory::kNvme)) t += current_[i].load();
  }
  return t;
}

int64_t MemoryStats::total_peak() const { return total_peak_.load(); }

void MemoryStats::reset_peaks() {
  for (size_t i = 0; i < kN; ++i) peak_[i] = current_[i].load();
  total_peak_ = total_current();
}

void MemoryStats::restart_window() const {
  for (size_t i = 0; i < kN; ++i) window_peak_[i] = current_[i].load();
}

std::string MemoryStats::report(const std::string& title) const {
  std::ostringstream os;
  char line[160];
  os << title << "\n";
  std::snprintf(line, sizeof(line), "  %-18s %14s %14s\n", "category", "current MiB", "peak MiB");
  os << line;
  auto row = [&](size_t i) {
    std::snprintf(line, sizeof(line), "  %-18s %14.3f %14.3f\n", to_string(static_cast<MemCategory>(i)),
                  current_[i].load() / 1048576.0, peak_[i].load() / 1048576.0);
    os << line;
  };
  for (size_t i = 0; i < kN; ++i) {
    if (i != idx(MemCategory::kNvme)) row(i);
  }
  std::snprintf(line, sizeof(line), "  %-18s %14.3f %14.3f\n", "total memory", total_current() / 1048576.0,
                total_peak() / 1048576.0);
  os << line;
  row(idx(MemCategory::kNvme));
  return os.str();
}

}  // namespace zeroshard
