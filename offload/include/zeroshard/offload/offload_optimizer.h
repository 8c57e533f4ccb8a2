// SPDX-License-Identifier: Apache-2.0
#pragma once
// OffloadedOptimizer: the optimizer step of ZeRO-Offload / ZeRO-Infinity. The optimizer state of
// this rank's shards (fp32 master values and moments, or SGD's momentum buffers) lives in host
// memory (Target CPU) or in files on an NVMe drive (Target NVME), and the update runs on the CPU
// with the fused kernels of cpu_adam.h (ADAM, ADAMW) and cpu_sgd.h (SGD); the engine's shards
// receive the new values.
//
//   auto opt = zeroshard::make_engine_optimizer(run.optimizer, run.offload, session.rank(), &engine.memory());
//   engine.step(*opt);   // device, cpu or nvme, as OffloadOptions::target says
//
// Each step walks every shard in chunks of `block_size` bytes per state array:
//   CPU   the state arrays are host tensors from a PinnedPool (page-locked); when the shard itself is
//         an fp32 CPU tensor it is the master (no copy), otherwise a host fp32 master is kept and
//         gradients/values travel through pinned staging buffers.
//   NVME  each shard has two state files under <nvme_path>/zeroshard-rank<R>/ holding chunk by
//         chunk [master | exp_avg | exp_avg_sq] (SGD: [master | momentum_buffer], or [master]
//         without momentum). A step reads chunk k+1.. ahead while chunk k is
//         updated and chunk k-1 is written, through buffer_count pinned buffers and the async I/O
//         engine (aio.h), and writes the new state into the *other* file: the previous step's
//         file stays intact until the step has completed. Every chunk carries a CRC-32C kept in
//         memory; a read that does not match (file truncated or changed behind the engine's back)
//         is an IoError naming the file, the offset and the chunk.
//         With the parameter shards on NVMe too, on a CPU run (the engine's store keeping them in
//         nvme_generations files of their own: ShardPager::master_generations), the fp32 master
//         is held once, there: the records hold the moments only ([exp_avg | exp_avg_sq],
//         [momentum_buffer], plain SGD no file), the step reads each shard through the pager,
//         updates it in place and the store writes it into its other generation, made current
//         when the whole step has completed (Adam: 24 instead of 28 bytes per parameter on the
//         drive, 4 fewer read and written per step).
// With nvme_generations = 1 each shard has one state file, updated in place (half the
// disk); a step that fails then cannot be undone (see nvme_generations below). Otherwise:
// a step that fails (disk full, I/O error, checksum) leaves the training state as it was before
// the step: the shards are restored from the intact file (or the store's intact generation),
// update counts are unchanged, and the error says so; after the cause is fixed, the same step can be retried (or a checkpoint saved).
// Results equal the device-resident optimizer bit for bit in fp32 on a CPU with AVX2 (the fused
// kernels' contract, see cpu_adam.h and cpu_sgd.h). ADAM, ADAMW and SGD (momentum, Nesterov) are
// supported; OptimizerOptions are checked as make_optimizer() checks them.
// Files are created at the first step, truncated if left by an earlier run, and removed by the
// destructor; a lock file stops two processes from using the same rank directory.
// With offloaded parameter shards (params CPU or NVME: the engine's ShardStore), engine.step hands the shards over
// with a pager and the step brings each shard's values in only while it updates it (reading the
// next one ahead), so the parameters never have to fit in memory at once; offloaded gradient shards
// (offload.grads) come in the same way. Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/io/aio.h"
#include "zeroshard/offload/cpu_adam.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/store/store_options.h"  // OffloadTarget

namespace zeroshard {

class MemoryStats;

// Where the optimizer state lives and how it is reached. The defaults are the config's `offload`
// section, except `target` (an OffloadedOptimizer is for kCpu or kNvme; make_engine_optimizer
// takes kDevice too).
struct OffloadOptions {
  OffloadTarget target = OffloadTarget::kCpu;
  // Where the engine keeps the parameter shards (the step then expects a pager; kDevice: resident
  // shards): the engine's ShardingOptions::offload_params.target.
  OffloadTarget params = OffloadTarget::kDevice;
  std::string nvme_path;            // NVME: existing, writable directory
  bool pin_memory = true;
  int64_t block_size = 1 << 20;     // bytes per state array per chunk (multiple of 4096)
  int queue_depth = 32;
  int buffer_count = 4;             // pinned chunk buffers in the NVMe pipeline (>= 2)
  // NVME: 2 state files per shard (a failed step rolls back), or 1 updated in place (half the
  // disk; a failed step leaves the state partly updated: the optimizer then refuses further steps
  // and exports, and training resumes from the last checkpoint).
  int nvme_generations = 2;
  IoBackend io_backend = IoBackend::kAuto;
  bool direct_io = true;            // O_DIRECT (falls back with a warning where refused)
  SimdPath simd = SimdPath::kAuto;
  // The trainer runs each step during backward (ShardingEngine::step_during_backward); target CPU
  // with resident parameter and gradient shards only.
  bool overlap_step = false;
};

class OffloadedOptimizer final : public ShardedOptimizer {
 public:
  // `rank` names the NVMe rank directory. `mem` (may be null) receives the pinned staging bytes.
  // `io` (may be null: built from options) lets tests wrap the I/O engine to inject faults.
  // NVME: checks at once that nvme_path exists and is writable (IoError naming it otherwise), and
  // takes the rank directory's lock.
  // UsageError naming OffloadOptions.<field> for a target other than CPU or NVME and for an
  // out-of-range block_size, buffer_count or nvme_generations; OptimizerOptions are checked as
  // make_optimizer() checks them.
  OffloadedOptimizer(const OptimizerOptions& optimizer, const OffloadOptions& options, int rank,
                     MemoryStats* mem = nullptr, std::shared_ptr<IoEngine> io = nullptr);
  ~OffloadedOptimizer() override;

  void step(const std::vector<ParamShard>& shards) override;
  void step(std::vector<ParamShard>& shards, ShardPager& pager) override;
  bool expects_offloaded_params() const override;
  // Target CPU with resident parameter shards: the step can run during backward, writing the new
  // values and state into a second set of host arrays (host memory for the state doubles); the
  // step's end swaps them in, or drops them.
  bool steps_shards_during_backward() const override;
  void begin_shard_step(const std::vector<ParamShard>& shards) override;
  void step_shard(size_t i, const ParamShard& shard) override;
  void finish_shard_step(const std::vector<ParamShard>& shards) override;
  size_t abandon_shard_step(const std::vector<ParamShard>& shards) override;
  int64_t state_bytes() const override;
  Placement placement() const override;
  std::string describe() const override;
  int64_t steps() const override;
  // Adam/AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer (none without momentum), as the device
  // optimizers name them, so checkpoints move between placements.
  std::vector<std::string> state_names() const override;
  // NVME: reads the moments back from the current files (checksums verified).
  std::vector<ShardOptimizerState> export_state() const override;
  void import_state(std::vector<ShardOptimizerState> state, int64_t steps) override;

  // NVME: the directory holding this rank's files (empty for CPU).
  std::string rank_dir() const;
  // Bytes read/written by the NVMe store and the time its steps spent, since construction.
  struct IoStats {
    int64_t bytes_read = 0;
    int64_t bytes_written = 0;
    double step_seconds = 0;  // wall time of the NVMe steps
  };
  IoStats io_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The optimizer `optimizer` and `offload` ask for: make_optimizer's (device-resident state) when
// offload.target = kDevice, an OffloadedOptimizer otherwise.
std::unique_ptr<ShardedOptimizer> make_engine_optimizer(const OptimizerOptions& optimizer, const OffloadOptions& offload,
                                                        int rank, MemoryStats* mem = nullptr);

}  // namespace zeroshard
