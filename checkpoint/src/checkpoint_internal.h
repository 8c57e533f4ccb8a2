// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the Checkpointer (checkpoint.cpp, checkpoint_save.cpp, checkpoint_load.cpp): its
// state, the snapshot a save writes, and the collective failure agreement every step of a save
// or load ends with (so no rank waits for one that failed).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint.pb.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/io/aio.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/engine/flat_shard.h"

namespace zeroshard::detail {

// The section name prefix of flat parameter i in rank files: "f<i>".
std::string flat_key(size_t i);
std::string shape_str(const std::vector<int64_t>& s);

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

}  // namespace zeroshard::detail

namespace zeroshard {

struct Checkpointer::Impl {
  Impl(ShardingEngine& e, CheckpointOptions opts, std::string cfg);
  ShardingEngine& engine;
  CheckpointOptions o;
  std::string config_text;
  std::shared_ptr<IoEngine> io;           // rank files, manifest, `latest`
  std::shared_ptr<Communicator> comm;     // the engine's world (sync saves, loads)
  std::shared_ptr<Communicator> bg_comm;  // the background writer's own
  std::thread worker;
  std::exception_ptr worker_error;
  int64_t durable_step = -1;
  std::mutex mu;

  void join();
  void check_no_pending_grads(const char* what) const;

  // save (checkpoint_save.cpp)
  detail::Snapshot snapshot(ShardedOptimizer& opt, const TrainingState& st);
  void snapshot_shards(detail::Snapshot& s, const std::vector<FlatShard*>& flats,
                       const std::vector<ShardOptimizerState>& opt_state, const std::vector<std::string>& state_names);
  void snapshot_buffers(detail::Snapshot& s);
  void fill_manifest(ckpt::Manifest& m, ShardedOptimizer& opt, const TrainingState& st, const std::vector<FlatShard*>& flats,
                     const std::vector<ShardOptimizerState>& opt_state);
  std::string write(const detail::Snapshot& s, Communicator& c);  // collective over c
  void prepare_dir(const std::string& root, const std::string& tmp);
  int64_t write_rank_file(const detail::Snapshot& s, const std::string& tmp);
  void commit(const detail::Snapshot& s, const std::string& root, const std::string& tmp, const std::string& final_dir);
  void apply_retention(const std::string& root, const std::string& final_dir);

  // load (checkpoint_load.cpp)
  void apply(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir, TrainingState& out);
  void check_structure(const ckpt::Manifest& m, const std::vector<FlatShard*>& flats, const std::string& dir) const;
  void check_optimizer(const ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir) const;
  void check_param_groups(const ckpt::Manifest& m, const std::string& dir) const;
  void load_flats(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir,
                  const std::vector<FlatShard*>& flats);
  void load_buffers(const ckpt::Manifest& m, const std::string& dir);
  void load_rank_state(const ckpt::Manifest& m, const std::string& dir, TrainingState& out);
};

}  // namespace zeroshard
