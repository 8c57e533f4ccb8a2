// SPDX-License-Identifier: Apache-2.0
#pragma once
// Memory reports: a summary table in the manner of torch.cuda.memory_summary for zeroshard's own
// categories, a JSON memory snapshot, and the out-of-memory handler every zeroshard program runs
// (through run_main): on c10::OutOfMemoryError or std::bad_alloc it prints the summary and the
// largest live allocations, writes a snapshot file, and ends the job with kOutOfMemoryExitCode.
// docs/memory.md shows the output and how to read it.
//
// What the report knows:
//   - the allocator: LibTorch's CPU allocator through the tracking allocator (host_memory.h), and
//     on a CUDA device the CUDA caching allocator's statistics and blocks;
//   - sources: whoever registers one (the ShardingEngine registers its per-category accounting,
//     sharding/memory.h); the bytes the allocator holds beyond the registered categories are shown
//     as "activations and other" (saved activations, temporaries, data batches).
// Thread-safety: all functions may be called from any thread.

#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"  // kOutOfMemoryExitCode
#include "zeroshard/core/session_options.h"  // MemoryOptions

namespace zeroshard {


struct MemoryRow {
  std::string name;
  int64_t current = 0;
  int64_t peak = 0;
  // True when these bytes are tensors of the compute device's allocator (so they are part of its
  // "allocated" figure); false for pinned host buffers, offloaded state, files on disk.
  bool in_device_allocator = true;
  bool on_disk = false;  // not memory at all (NVMe files): shown, never summed
};
using MemoryRowsFn = std::function<std::vector<MemoryRow>()>;

// Registers a source of rows shown under `title`; returns a handle for remove_memory_source. The
// function is called from the reporting thread (possibly while out of memory): it must not
// allocate tensors.
int add_memory_source(const std::string& title, MemoryRowsFn rows);
void remove_memory_source(int handle);

// Where reports go and what they say; the Session sets these from its MemoryOptions.
struct MemoryReportOptions {
  std::string snapshot_dir;  // "" = the working directory
  int top_allocations = 10;  // largest live allocations printed on out-of-memory
  c10::Device device = c10::Device(c10::kCPU);
  int rank = 0;
  int world_size = 1;
};
void set_memory_report_options(const MemoryReportOptions& options);
MemoryReportOptions memory_report_options();

// Applies `options` for `device`: installs the host tracking allocator (track_allocations, the
// cache of freed host blocks or a limit), sizes that cache (host_cache_mib), sets limit_mib on the
// device's allocator (CPU: the tracking allocator's limit; CUDA: the caching allocator's
// per-process memory fraction), and the report options. ConfigError for a limit above the device's
// memory, a host_cache_mib out of range or a snapshot_dir that is not a writable directory.
void apply_memory_options(const MemoryOptions& options, c10::Device device, int rank, int world_size);

// The compute device's allocator now: bytes held, peak, and the limit in bytes (0: none).
// `known` is false when nothing measures it (CPU with memory.track_allocations off).
struct DeviceMemoryUse {
  bool known = false;
  int64_t current = 0;
  int64_t peak = 0;
  int64_t limit = 0;
};
DeviceMemoryUse device_memory_use();

// The summary table for the configured device: allocator rows (current, peak, total allocated,
// total freed, allocation counts, limit), then every source's rows, then "activations and other".
std::string memory_summary();
// The `n` largest live allocations (host; on CUDA the largest allocated blocks) as a table.
std::string largest_allocations_table(size_t n);
// Everything the summary knows, plus every live host allocation grouped by phase and the largest
// 1000, as the text of one JSON object on one line; `error` (may be empty) is recorded as the cause.
std::string memory_snapshot(const std::string& error);
// Writes memory_snapshot(error) to `path` (created or replaced; written to a temporary file
// first, then renamed, so a half-written snapshot never appears). IoError naming the path.
void write_memory_snapshot(const std::string& path, const std::string& error);
// The default snapshot path: <snapshot_dir>/zeroshard-oom-rank<R>.json.
std::string default_snapshot_path();

// Whether `e` is an out-of-memory failure: c10::OutOfMemoryError, std::bad_alloc, or any error
// thrown after the host tracking allocator refused an allocation (e.g. one a data-loader thread
// passed on as a DataError).
bool is_out_of_memory(const std::exception& e);
// The report printed on out-of-memory: the error, the phase it happened in, the summary, the
// largest allocations, where the snapshot went (written here), and what to try.
std::string out_of_memory_report(const std::exception& e);

}  // namespace zeroshard
