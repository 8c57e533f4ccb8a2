// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a ShardedInit built, as the engine adopts it: the units sharded at construction (their flat
// parameters), the shard groups and the parameter store they were made with, and the memory
// accounting they report into. Implemented in sharded_init.cpp; the engine takes from it through
// these methods only.

#include <map>
#include <memory>
#include <unordered_set>
#include <vector>

#include "groups.h"
#include "flat_param.h"
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zeroshard::detail {

class ShardedInitState {
 public:
  ShardedInitState(Session& s, ShardingOptions o, ShardedInit* owner);
  // The state of the ShardedInit active on this thread (sharding Units as they are built), or null.
  static ShardedInitState* active();
  // The declare-unit observer (unit_registry.cpp): shards `module`, a Unit whose constructor just
  // returned, unless this init was stopped or has it already.
  void shard_unit(const torch::nn::Module* module);
  // Stops sharding (the engine adopts what was built).
  void deactivate();

  ShardedInit* owner() const { return owner_; }
  Session& session() const { return session_; }
  const ShardingOptions& options() const { return options_; }
  int units_sharded() const { return count_; }
  const std::shared_ptr<MemoryStats>& memory() const { return mem_; }
  // Whether `module` belongs to a unit sharded so far.
  bool built_in_unit(const torch::nn::Module* module) const { return in_units_.count(module) > 0; }
  // The groups the units were sharded over; null before the first unit.
  const ShardGroups* groups() const { return groups_ready_ ? &groups_ : nullptr; }
  // The flat parameters built for `module` (trainable first, then frozen; slot names relative to
  // the unit), or null when it is not a unit sharded here; take_unit hands them over.
  const std::vector<std::unique_ptr<FlatParam>>* built_flats(const torch::nn::Module* module) const;
  std::vector<std::unique_ptr<FlatParam>> take_unit(const torch::nn::Module* module);
  size_t units_not_taken() const { return units_.size(); }
  // offload.params = CPU / NVME: the store the units' shards went to (null when none); the engine
  // takes it over.
  std::unique_ptr<ShardStore> take_store() { return std::move(store_); }

 private:
  void store_shards(const std::string& name, const std::vector<std::unique_ptr<FlatParam>>& flats);

  Session& session_;
  ShardingOptions options_;
  ShardedInit* owner_;
  bool active_ = true;
  bool groups_ready_ = false;
  ShardGroups groups_;
  std::shared_ptr<MemoryStats> mem_ = std::make_shared<MemoryStats>();
  // Each unit's shards move here as soon as they are built, so a model larger than memory can be
  // constructed. Declared before `units_`, whose flat parameters point into it.
  std::unique_ptr<ShardStore> store_;
  std::map<const torch::nn::Module*, std::vector<std::unique_ptr<FlatParam>>> units_;
  int count_ = 0;
  // Every module inside a unit sharded so far (the unit hooks' on_wrap leaves them as they are).
  std::unordered_set<const torch::nn::Module*> in_units_;
};

}  // namespace zeroshard::detail
