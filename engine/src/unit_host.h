// SPDX-License-Identifier: Apache-2.0
#pragma once
// UnitHost: what a unit (sharded_unit.h) asks of the engine that owns it. A unit runs its own
// lifecycle (gather, forward, backward, reduce) and reads the pass's state through the queries
// below; what it does that concerns the other units or the run as a whole it reports as an event,
// and the engine acts on it (the unit-order record, the start of a backward, reading the next
// unit's offloaded shards ahead, the reductions in flight). The engine implements it
// (ShardingEngineImpl::Host, engine_root.cpp); the units never see the engine's other state.

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "zeroshard/comm/streams.h"
#include "zeroshard/engine/engine.h"

namespace zeroshard::detail {

class ShardedUnit;
class UnitSchedule;

class UnitHost {
 public:
  virtual ~UnitHost() = default;

  // --- what the units share ---
  virtual const ShardingOptions& options() const = 0;
  virtual DeviceStreams& streams() = 0;
  virtual CommCounters& counters() = 0;
  virtual UnitSchedule& schedule() = 0;
  virtual const ShardedUnit& root() const = 0;

  // --- the pass ---
  // A backward pass through this engine is running (see ShardingEngineImpl::in_backward).
  virtual bool in_backward() const = 0;
  // engine.forward() is running (a unit called outside it is a usage error).
  virtual bool forward_running() const = 0;
  // Completed backward passes: tells a stale autograd node apart.
  virtual uint64_t backward_passes() const = 0;
  // Gradients are reduced after this backward (false inside ShardingEngine::NoSync).
  virtual bool reduces_gradients() const = 0;
  // FULL_SHARD and HYBRID_SHARD free the gathered parameters after each unit's forward.
  virtual bool reshard_after_forward() const = 0;

  // --- events ---
  // `u` starts its forward (not a recomputation): it joins this forward's unit sequence.
  virtual void forward_started(const ShardedUnit& u) = 0;
  // The first pre-backward hook of a backward ran on `u`; `graph`: the nodes the backward will run,
  // or null when it cannot tell (engine_graph.cpp).
  virtual void backward_started(const ShardedUnit& u, const std::unordered_set<torch::autograd::Node*>* graph) = 0;
  // `u` is about to issue its gathers (the all-gather stream current): its offloaded shards are read
  // in first, agreed on by every rank, so that a read failing on one rank fails there on all.
  virtual void gathers_starting(ShardedUnit& u) = 0;
  // `u`'s gathers were issued: the engine reads the next unit's offloaded shards ahead.
  virtual void gathers_started(const ShardedUnit& u) = 0;
  // `u`'s gathers are complete on the compute stream: its offloaded shards go back to the store.
  virtual void gathers_complete(ShardedUnit& u) = 0;
  // `u` started its reduce-scatter (the reduce-scatter stream current): the reduction started before
  // it advances (its buffer freed), and `u`'s becomes the one in flight.
  virtual void reduction_started(ShardedUnit& u, const c10::Stream& compute) = 0;
  // `u`'s replica all-reduce is in flight: finished at the end of backward.
  virtual void replica_reduction_pending(ShardedUnit& u) = 0;
  // Gradient buffers the reduce-scatter stream read, kept until it is done with them.
  virtual void retire(std::vector<at::Tensor> buffers, const c10::Stream& compute) = 0;
  // `u`'s reductions finished (the reduce-scatter stream current): the gradient shards of its flats
  // whose reductions are complete hold their final values for this backward.
  virtual void gradients_reduced(ShardedUnit& u) = 0;
};

}  // namespace zeroshard::detail
