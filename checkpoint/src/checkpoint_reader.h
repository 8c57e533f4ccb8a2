// SPDX-License-Identifier: Apache-2.0
#pragma once
// CheckpointReader: the load side of a Checkpointer (checkpoint_load.cpp): the structure check,
// then every rank reads exactly its part of each flat parameter and of its optimizer state under
// the current layout, from whichever saved shards overlap it (resharding on load), then buffers,
// RNG states and per-rank entries.

#include <memory>
#include <string>
#include <vector>

#include "checkpoint.pb.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/io/aio.h"

namespace zeroshard::detail {

class CheckpointReader {
 public:
  CheckpointReader(ShardingEngine& engine, std::shared_ptr<IoEngine> io, std::shared_ptr<Communicator> comm);
  // Loads the checkpoint `m` in `dir` into the engine and `opt` (its state applied at the next
  // step), filling `out`.
  void apply(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir, TrainingState& out);

 private:
  void check_structure(const ckpt::Manifest& m, const std::vector<FlatShard*>& flats, const std::string& dir) const;
  void check_optimizer(const ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir) const;
  void check_param_groups(const ckpt::Manifest& m, const std::string& dir) const;
  void load_flats(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir,
                  const std::vector<FlatShard*>& flats);
  void load_buffers(const ckpt::Manifest& m, const std::string& dir);
  void load_rank_state(const ckpt::Manifest& m, const std::string& dir, TrainingState& out);

  ShardingEngine& engine_;
  std::shared_ptr<IoEngine> io_;
  std::shared_ptr<Communicator> comm_;
};

}  // namespace zeroshard::detail
