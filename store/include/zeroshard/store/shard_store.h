// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardStore: where the fp32 parameter shards of a ShardingEngine live between uses when
// offload.params is CPU or NVME (ZeRO-Infinity's parameter offload), and, in a store of its own,
// the fp32 gradient shards between the backward pass and the optimizer step when offload.grads is
// CPU or NVME (Kind::kGrads: files <slot>-<unit>.grad under zeroshard-grads-rank<R>, read-ahead
// buffers counted as gradient shards).
//
// A FlatParam with a store keeps its shard resident only while something uses it: the engine
// loads it for the unit's all-gather (reading the next unit's ahead, in the recorded order) and
// drops it once the gather is done; the offloaded optimizer loads it for the shard's update and
// writes it back; checkpoints, pretrained weights and exports load it shard by shard. So between
// uses no parameter bytes of the shard stay in working memory.
//
//   CPU   the shard is a host tensor (page-locked from a PinnedPool when CUDA is present). On a
//         CPU run the host tensor is the working shard itself: nothing is copied.
//   NVME  one file per shard, <nvme_path>/zeroshard-params-rank<R>/<slot>-<unit>.param, written and
//         read whole through the async I/O engine (O_DIRECT where the filesystem allows), space
//         reserved (fallocate; where the filesystem has none, its free space is checked) when the
//         slot is added, so a disk too small fails at wrap time.
//         With StoreOptions.generations = 2 (parameter shards whose fp32 master the offloaded
//         optimizer does not copy into its own records) a second file <slot>-<unit>.param.1: an
//         optimizer step writes each shard into the generation it did not read (begin_step), and
//         commit() makes those current, or abandon() drops them, so the step before stays whole.
//         A CRC-32C per block_size chunk is kept in memory; a read that does not match is an
//         IoError naming the file, the chunk's offset and the unit. A write that fails (disk full,
//         I/O error) is an IoError naming the file and offset, and the caller keeps its tensor:
//         nothing is lost, and the write can be retried.
// Bitwise: a shard loaded back equals what was saved.
// Not thread-safe (the training thread drives it); the I/O engine's thread does the transfers.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/io/aio.h"
#include "zeroshard/store/store_options.h"

namespace zeroshard {

class MemoryStats;

class ShardStore {
 public:
  enum class Kind { kParams, kGrads };
  // `options.target` must be kCpu or kNvme. NVME: creates and locks the rank directory (IoError
  // naming nvme_path when it cannot be used). `io` may be null (built from the options); tests
  // pass a FaultInjectingIo.
  ShardStore(const StoreOptions& options, int rank, MemoryStats* mem, std::shared_ptr<IoEngine> io = nullptr,
             Kind kind = Kind::kParams);
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  OffloadTarget target() const;
  Kind kind() const;
  // A new slot for a shard of `numel` fp32 elements, named by its unit in files and errors.
  // NVME: creates the file and reserves its space (IoError: disk full, naming the file).
  int add(const std::string& unit, int64_t numel);
  // Stores `values` (the slot's numel fp32 elements, contiguous, on any device) as the slot's
  // content. CPU on a CPU tensor: keeps the tensor itself. Throws IoError naming the file and
  // offset when a write fails; the slot's previous content is then invalid (the caller keeps
  // `values`, and a later save may retry).
  void save(int slot, const at::Tensor& values);
  // Write-behind: starts writing `values` as the slot's content and returns (NVME; CPU: save()),
  // after waiting for the previous write-behind (one in flight at a time). The store holds the
  // bytes (an aligned host buffer: `values` itself when it is one) until the write completes; load() meanwhile waits for it and takes the values from memory. A write that
  // fails keeps them there (the slot stays loadable, the next save retries) and is reported by
  // flush(). Never throws for the write itself.
  void save_async(int slot, const at::Tensor& values);
  // Waits for every write-behind in flight. Throws IoError naming the file and offset of the first
  // that failed since the last flush (their values stay in memory).
  void flush();
  // Drops the slot's content that is still in memory (a write-behind, waited for, or one that
  // failed) and any read ahead: for content that will not be loaded again (never throws).
  void discard(int slot) noexcept;
  // Starts reading the slot ahead of load() (NVME; no-op otherwise or when already started).
  void prefetch(int slot, c10::Device device);
  // The slot's values on `device` (contiguous fp32, a tensor of its own unless CPU on a CPU run),
  // waiting for a prefetch or reading now. Checksums verified (IoError naming file and offset).
  at::Tensor load(int slot, c10::Device device);
  // A tensor for the slot's values on `device` (contents undefined; nothing read) that save() can
  // write without a copy: for a caller that overwrites the shard whole. Drops a prefetch.
  at::Tensor allocate(int slot, c10::Device device);
  // Waits for and drops a prefetch that will not be loaded (never throws).
  void cancel(int slot) noexcept;

  // --- an optimizer step over the store's shards (NVME with 2 generations; otherwise saves go in
  // place and abandon() cannot undo them) ---
  int generations() const;
  // From now on save() writes a slot into the generation it was not read from; loads of a slot
  // saved since read that generation.
  void begin_step();
  // Waits for every write (flush(): IoError, with the step still open, when one failed), then
  // makes the generations written since begin_step() current.
  void commit();
  // Drops what was saved since begin_step() (and every read ahead): loads read the generations
  // current before it. Never throws.
  void abandon() noexcept;

  const std::string& unit(int slot) const;
  // The unit's final name (a unit built by a ShardedInit is renamed once the model is complete),
  // for messages; the file keeps its name.
  void rename(int slot, const std::string& unit);
  std::string file(int slot) const;  // NVME: the slot's file a load reads; CPU: ""
  // Bytes held for the slots: on disk (NVME, whole files, every generation) or in host memory (CPU
  // on CUDA).
  int64_t bytes_on_disk() const;
  int64_t bytes_in_host() const;
  struct IoStats {
    int64_t bytes_read = 0;
    int64_t bytes_written = 0;
    double read_wait_seconds = 0;  // training-thread time spent waiting for reads
  };
  IoStats io_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zeroshard
