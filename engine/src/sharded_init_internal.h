// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private state of ShardedInit, read by the engine when it adopts the units sharded at
// construction.

#include <map>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "groups.h"
#include "flat_param.h"
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zeroshard::detail {

struct ShardedInitImpl {
  ShardedInitImpl(Session& s, ShardingOptions o);
  void shard_unit(const torch::nn::Module* module);  // the declare-unit observer
  void deactivate();

  Session& session;
  ShardingOptions options;
  bool active = true;
  bool groups_ready = false;
  detail::ShardGroups groups;
  std::shared_ptr<MemoryStats> mem = std::make_shared<MemoryStats>();
  // offload.params = CPU / NVME: each unit's shards move here as soon as they are built, so a model
  // larger than memory can be constructed; the engine takes the store over. Declared before
  // `units`, whose flat parameters point into it.
  std::unique_ptr<ShardStore> store;
  // Flat parameters of each unit sharded so far (trainable first, then frozen); slot names are
  // relative to the unit until the engine renames them.
  std::map<const torch::nn::Module*, std::vector<std::unique_ptr<FlatParam>>> units;
  int count = 0;
  ShardedInit* owner = nullptr;
  // Every module inside a unit sharded so far (the unit hooks' on_wrap leaves them as they are).
  std::unordered_set<const torch::nn::Module*> in_units;
};

extern thread_local ShardedInitImpl* t_active_init;  // the thread's active ShardedInit, or null

}  // namespace zeroshard::detail
