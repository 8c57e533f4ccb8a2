// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host (CPU) memory accounting: a tracking allocator installed in front of LibTorch's CPU
// allocator. It counts the bytes of every CPU tensor storage allocated after installation (current,
// peak, totals), keeps a record of each live allocation (size, the phase that made it, a sequence
// number) so an out-of-memory report can list the largest, and can refuse allocations beyond a
// limit with c10::OutOfMemoryError, as the CUDA caching allocator does under a memory fraction.
// LibTorch keeps no statistics of its own for CPU memory.
//
// Storages allocated before install() are not counted (nor their frees). The Session installs the
// allocator when memory.track_allocations or memory.limit_mib asks for it (docs/memory.md).
// Thread-safe: counters are atomics; the live-allocation table is striped over 64 locks by pointer
// hash (no global lock per allocation).
//
// It also keeps a bounded cache of freed blocks of at least kHostCacheMinBlock bytes and hands a
// cached block back to the next request of exactly its size (memory.host_cache_mib). The engine
// frees and reallocates the same large buffers every step (gradient buffers, gathered parameters);
// glibc serves LibTorch's 64-byte-aligned requests from fresh pages each time (a freed chunk no
// longer fits the aligned request of its own size once small chunks sit beside it, and above the
// mmap threshold every block is a new mapping), so every step paid a page fault per 4 KiB it
// touched. Cached bytes are not in `current`: a cached block is free to the accounting, idle to the
// system. With a limit in force, live + cached bytes stay within it (cached blocks go first).

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard {

struct HostMemoryStats {
  int64_t current = 0;          // bytes of live tracked CPU storages
  int64_t peak = 0;             // highest `current` since install() or the last reset_peak()
  int64_t allocated_total = 0;  // bytes allocated since install()
  int64_t freed_total = 0;      // bytes freed since install()
  int64_t allocations = 0;      // live storages
  int64_t allocations_total = 0;
  int64_t limit = 0;            // set_host_memory_limit(); 0 = none
  int64_t refused = 0;          // allocations refused (limit or the system allocator failing)
  int64_t cached = 0;           // bytes of freed blocks held in the cache for reuse
  int64_t cache_limit = 0;      // set_host_memory_cache_limit(); 0 = no cache
  int64_t cache_hits = 0;       // allocations served from the cache since install()
};

// Installs the tracking allocator (idempotent). Call before creating the tensors to measure.
void install_host_memory_tracking();
bool host_memory_tracking_installed();
HostMemoryStats host_memory_stats();
// Sets the peak to the current value.
void reset_host_memory_peak();

// The memory one section of code needs: the peak of the bytes allocated since
// begin_host_memory_window() that are still live, so frees of older storages (which another
// thread may release at any moment, e.g. a communicator's finished work) do not lower it. One
// window at a time; beginning another restarts it.
void begin_host_memory_window();
int64_t host_memory_window_peak();

// Allocations that would take the tracked bytes above `bytes` throw c10::OutOfMemoryError naming
// the request, the bytes in use and the limit (memory.limit_mib). 0 removes the limit. Needs the
// allocator installed (UsageError otherwise). `source` names where the limit came from, for the
// error message (e.g. "memory.limit_mib = 64").
void set_host_memory_limit(int64_t bytes, const std::string& source);
// The `source` of the limit in force ("" when none).
std::string host_memory_limit_source();

// ---- The cache of freed blocks ---------------------------------------------------------------
// Blocks smaller than this go back to the system allocator at once: glibc reuses small chunks well
// (128 KiB is glibc's initial mmap threshold).
constexpr int64_t kHostCacheMinBlock = int64_t{128} << 10;
// Bytes of freed blocks the tracking allocator may hold for reuse (the oldest go first beyond it);
// 0 turns the cache off and frees what it holds. Needs the allocator installed for bytes > 0
// (UsageError otherwise). `source` names where the value came from, for errors.
void set_host_memory_cache_limit(int64_t bytes, const std::string& source);
// Frees every cached block (as torch.cuda.empty_cache() does for CUDA); returns the bytes freed.
int64_t release_cached_host_memory();

// ---- Phase labels ----------------------------------------------------------------------------
// A phase names what the calling thread is doing ("forward: unit 'blocks.2'", "optimizer step"),
// so every allocation is recorded with the phase that made it. Labels are interned once
// (memory_phase_id) and then set by id, which costs one thread-local store.
int memory_phase_id(const std::string& label);
void set_memory_phase(int id);  // 0 = no phase
int current_memory_phase();
const std::string& memory_phase_label(int id);
// The phase most recently set by any thread (what the job was doing, for an out-of-memory report
// taken on another thread, e.g. after a CUDA allocation failed on an autograd device thread).
int last_memory_phase();

// Sets a phase for a scope and restores the previous one.
class MemoryPhase {
 public:
  explicit MemoryPhase(int id) : previous_(current_memory_phase()) { set_memory_phase(id); }
  explicit MemoryPhase(const std::string& label) : MemoryPhase(memory_phase_id(label)) {}
  ~MemoryPhase() { set_memory_phase(previous_); }
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  int previous_;
};

// ---- Live allocations ------------------------------------------------------------------------
struct HostAllocation {
  int64_t bytes = 0;
  int phase = 0;        // memory_phase_id of the phase that allocated it
  uint64_t sequence = 0;  // 1 for the first allocation after install(), counting up
};
// The `n` largest live allocations, largest first (ties: oldest first).
std::vector<HostAllocation> largest_host_allocations(size_t n);
struct HostPhaseTotal {
  int phase = 0;
  int64_t bytes = 0;
  int64_t count = 0;
};
// Live bytes and allocations by phase, largest first.
std::vector<HostPhaseTotal> host_allocations_by_phase();

// The last refused allocation since install(): what was asked, what was in use, in which phase.
struct HostRefusal {
  bool happened = false;
  int64_t requested = 0;
  int64_t in_use = 0;
  int64_t limit = 0;
  int phase = 0;
  std::string reason;  // the limit, or the system allocator's message
};
HostRefusal last_host_refusal();

// Called on the refusing thread just before the tracking allocator throws, while every live
// allocation still exists (the out-of-memory report is taken there, memory_report.h). It must
// not allocate LibTorch tensors. One observer; nullptr removes it.
void set_host_refusal_observer(void (*observer)());

}  // namespace zeroshard
