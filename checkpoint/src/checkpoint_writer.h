// SPDX-License-Identifier: Apache-2.0
#pragma once
// CheckpointWriter: the save side of a Checkpointer (checkpoint_save.cpp): the snapshot a save
// writes, captured on the training thread, then rank files -> manifest -> rename -> `latest` ->
// retention, each step ending with the collective failure agreement (so no rank waits for one
// that failed).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.pb.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/io/aio.h"

namespace zeroshard::detail {

// One section to write: metadata and a host tensor, raw bytes, or (synchronous saves) a function
// that produces the tensor when the section is written and one run once it is, so a save holds
// one shard's values at a time (a shard offloaded to NVMe is read back, written, released).
struct PendingSection {
  std::string name, dtype;
  std::vector<int64_t> shape;
  at::Tensor tensor;  // CPU, contiguous; or undefined with `bytes` or `produce` set
  std::string bytes;
  std::function<at::Tensor()> produce;
  std::function<void()> written;
};

// Everything a save writes, captured on the training thread.
struct Snapshot {
  int64_t step = 0;
  int rank = 0, world = 1, shard_rank = 0;
  bool holds_shards = true;
  std::vector<PendingSection> sections;
  ckpt::Manifest manifest;  // rank 0: all but rank_files
};

class CheckpointWriter {
 public:
  CheckpointWriter(ShardingEngine& engine, CheckpointOptions options, std::string config_text,
                   std::shared_ptr<IoEngine> io, std::shared_ptr<Communicator> comm);
  const CheckpointOptions& options() const { return options_; }
  // Everything the save of `st` writes (sync saves: the live tensors, produced section by section;
  // async: copies).
  Snapshot snapshot(ShardedOptimizer& opt, const TrainingState& st);
  // Writes `s` and returns its step directory; collective over `c`. Thread-safe against
  // durable_step().
  std::string write(const Snapshot& s, Communicator& c);
  int64_t durable_step() const;

 private:
  void snapshot_shards(Snapshot& s, const std::vector<FlatShard*>& flats,
                       const std::vector<ShardOptimizerState>& opt_state, const std::vector<std::string>& state_names);
  void snapshot_buffers(Snapshot& s);
  void fill_manifest(ckpt::Manifest& m, ShardedOptimizer& opt, const TrainingState& st, const std::vector<FlatShard*>& flats,
                     const std::vector<ShardOptimizerState>& opt_state);
  void prepare_dir(const std::string& root, const std::string& tmp);
  int64_t write_rank_file(const Snapshot& s, const std::string& tmp);
  void commit(const Snapshot& s, const std::string& root, const std::string& tmp, const std::string& final_dir);
  void apply_retention(const std::string& root, const std::string& final_dir);

  ShardingEngine& engine_;
  CheckpointOptions options_;
  std::string config_text_;
  std::shared_ptr<IoEngine> io_;        // rank files, manifest, `latest`
  std::shared_ptr<Communicator> comm_;  // the engine's world
  mutable std::mutex mu_;
  int64_t durable_step_ = -1;
};

}  // namespace zeroshard::detail
