#pragma once
// Private state of ShardedInit, read by the engine when it adopts the units sharded at
// construction.

#include <map>
#include <memory>
#include <vector>

#include "groups.h"
#include "zeroshard/sharding/flat_param.h"
#include "zeroshard/sharding/shard_store.h"
#include "zeroshard/sharding/sharded_init.h"

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
};

}  // namespace zeroshard::detail
