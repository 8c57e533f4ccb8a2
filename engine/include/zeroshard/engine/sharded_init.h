// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardedInit: shard each unit the moment it is constructed, so building a model never holds
// the whole model on a rank (host memory at init stays near one unit plus the shards so far).
//
//   zeroshard::ShardedInit init(session, options);   // before building the model
//   Gpt model(cfg);                                    // each zeroshard::Unit is sharded as built
//   zeroshard::ShardingEngine engine(init, model.ptr());
//
// While a ShardedInit is alive on a thread, every zeroshard::Unit constructed on that thread has
// its parameters (those not in units built before it, i.e. nested units) flattened, broadcast from
// rank 0 when sharding.sync_module_states is on, sharded and freed right after its module's
// constructor returns. The root's own parameters (embeddings, final norm) are sharded by the
// engine. Construction is collective: every rank must build the same units in the same order;
// each unit's structure is compared across ranks when it is sharded, and a difference is a
// UsageError naming the unit, before any broadcast could mismatch. Tied parameters may be shared
// within a unit or by the root, not between two units built separately (a clear error).
// One ShardedInit per thread at a time; it stops sharding when handed to a ShardingEngine.

#include <memory>

#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"

namespace zeroshard {

namespace detail {
class ShardedInitState;
}  // namespace detail

class ShardedInit {
 public:
  ShardedInit(Session& session, ShardingOptions options);
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;

  // Stops sharding Units constructed from now on (the engine does this when it adopts the units).
  void stop();
  // The ShardedInit active on this thread (sharding Units as they are built), or null.
  static const ShardedInit* active();
  // Whether `module` belongs to a unit sharded so far (its parameters are final: the unit hooks
  // adapted it when it was built).
  bool built_in_unit(const torch::nn::Module* module) const;
  const ShardingOptions& options() const;
  // Units sharded so far.
  int units_sharded() const;
  const MemoryStats& memory() const;

 private:
  friend class ShardingEngine;  // adopts the units sharded so far
  std::unique_ptr<detail::ShardedInitState> impl_;
};

}  // namespace zeroshard
