#pragma once
// Host (CPU) memory measurement: a tracking allocator installed in front of LibTorch's CPU
// allocator that counts the bytes of every CPU tensor storage allocated after installation,
// current and peak. Used by the benchmarks to measure activation memory on CPU, where LibTorch
// keeps no allocator statistics. Thread-safe (atomics). Storages allocated before install() are
// not counted (their frees are not either).

#include <cstdint>

namespace zeroshard {

struct HostMemoryStats {
  int64_t current = 0;  // bytes of live tracked CPU storages
  int64_t peak = 0;     // highest `current` since install() or the last reset_peak()
};

// Installs the tracking allocator (idempotent). Call before creating the tensors to measure.
void install_host_memory_tracking();
bool host_memory_tracking_installed();
HostMemoryStats host_memory_stats();
// Sets the peak to the current value.
void reset_host_memory_peak();

}  // namespace zeroshard
