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
#include "zeroshard/sharding/engine.h"
#include "zeroshard/sharding/lora.h"

namespace zeroshard {

namespace detail {
struct ShardedInitImpl;
}  // namespace detail

class ShardedInit {
 public:
  ShardedInit(Session& session, ShardingOptions options);
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;

  // Stops sharding Units constructed from now on (the engine does this when it adopts the units).
  void stop();
  // LoRA with a ShardedInit: from now on every unit, as it is sharded, gets adapters on the
  // zeroshard::lora::Linear layers that `options.targets` match and has its other parameters frozen
  // (a unit is sharded before lora::apply could see it). Its path in the model is not known yet, so
  // a pattern matches a layer when it matches some path followed by the layer's name inside the
  // unit: "*.qkv" and "h*.qkv" do, "h0.qkv" matches the qkv of every block. After building the
  // model call lora::apply(model, options) with the same options: it adapts the layers outside
  // units, freezes the root's parameters, and checks by full name that every unit got exactly
  // the adapters the patterns ask for (ConfigError naming the layer otherwise). UsageError once a
  // unit has been sharded. ConfigError for bad options (as lora::apply).
  void apply_lora(const lora::Options& options);
  // Units sharded so far.
  int units_sharded() const;
  const MemoryStats& memory() const;

 private:
  friend class ShardingEngine;  // adopts the units sharded so far
  std::unique_ptr<detail::ShardedInitImpl> impl_;
};

}  // namespace zeroshard
