// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-rank memory accounting by category, with current and peak bytes. The engine records every
// allocation it makes for model state and communication, so the report shows where bytes live
// (and the ZeRO formula can be checked against it). Thread-safe (atomics).
//
// Two kinds of peak: peak()/total_peak() are the high-water marks since construction or
// reset_peaks() (the memory summary and out-of-memory report show them); window_peak() is the
// high-water mark since the last restart_window(), which a reader uses to see what one interval
// needed (the metrics file's per-step peak, zeroshard/train/metrics.h) without lowering the others.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace zeroshard {

enum class MemCategory {
  kShardedParams = 0,  // this rank's fp32 parameter shards (master weights)
  kGatheredParams,     // transient: unsharded parameters of gathered units
  kGradShards,         // this rank's fp32 gradient shards
  kGradBuffers,        // transient: unsharded gradients awaiting reduce-scatter (or no_sync)
  kOptimizerState,     // optimizer state for this rank's shards
  kCommBuffers,        // staging buffers of collectives
  kOffloadHost,        // offloaded optimizer state (fp32 master, moments) in host memory
  kPinnedHost,         // pinned host staging buffers (D2H/H2D copies, NVMe pipeline)
  kNvme,               // bytes of offloaded state in files on NVMe (disk, not memory)
  kCount
};
const char* to_string(MemCategory c);

class MemoryStats {
 public:
  void add(MemCategory c, int64_t bytes);
  void sub(MemCategory c, int64_t bytes);
  // Replaces the current value (for categories measured rather than tracked, e.g. optimizer state).
  void set(MemCategory c, int64_t bytes);
  int64_t current(MemCategory c) const { return current_[idx(c)].load(); }
  int64_t peak(MemCategory c) const { return peak_[idx(c)].load(); }
  // Persistent model state in memory: sharded params + grad shards + optimizer state, on the
  // device or offloaded to host memory (not what lives on NVMe).
  int64_t persistent() const;
  // Memory only: every category but kNvme.
  int64_t total_current() const;
  int64_t total_peak() const;  // peak of the sum, not the sum of peaks
  void reset_peaks();
  // Per-category peak since the last restart_window() (or construction). One reader owns the
  // window; restarting it changes no other figure, so it is allowed through a const reference.
  int64_t window_peak(MemCategory c) const { return window_peak_[idx(c)].load(); }
  void restart_window() const;
  // A table: category, current, peak (MiB and bytes).
  std::string report(const std::string& title) const;

 private:
  static size_t idx(MemCategory c) { return static_cast<size_t>(c); }
  void update_peaks(MemCategory c);
  static constexpr size_t kN = static_cast<size_t>(MemCategory::kCount);
  std::array<std::atomic<int64_t>, kN> current_{};
  std::array<std::atomic<int64_t>, kN> peak_{};
  std::atomic<int64_t> total_peak_{0};
  mutable std::array<std::atomic<int64_t>, kN> window_peak_{};
};

}  // namespace zeroshard
