// SPDX-License-Identifier: Apache-2.0
#pragma once
// The engine's orchestration state, shared by its units (sharded_unit.h) and the engine's files:
// engine.cpp (construction, the optimizer side), engine_root.cpp (the root forward, the end of
// backward, recovery after errors), engine_graph.cpp (what a backward runs), engine_offload.cpp
// (the stores and the optimizer's pager), unit_order.cpp (the cross-rank unit-order check).

#include <torch/csrc/autograd/function.h>

#include <exception>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "flat_param.h"
#include "groups.h"
#include "sharded_unit.h"
#include "unit_schedule.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/engine/autocast.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/store/shard_store.h"

namespace zeroshard {
namespace detail {

class ShardedInitState;

// Keeps a weak reference to a gradient function recorded by a forward (engine_graph.cpp).
void remember_node(std::vector<std::weak_ptr<torch::autograd::Node>>* nodes,
                   const std::shared_ptr<torch::autograd::Node>& node);

// The engine's side of an offloaded optimizer step (ShardPager, optimizer.h): shard i of the step
// is trainable flat parameter i.
class FlatParamPager final : public ShardPager {
 public:
  // `store`: the parameter store the shards live in (null when they are resident).
  FlatParamPager(std::vector<FlatParam*> flats, std::vector<ParamShard>& shards, ShardStore* store);
  int64_t numel(size_t i) const override;
  void acquire(size_t i, bool read, bool grad) override;
  void release(size_t i, bool modified) override;
  void prefetch(size_t i, bool read) override;
  // The store's generations when every shard is in it, on NVMe, and computed on the CPU (the
  // optimizer then updates the stored values themselves); else 0.
  int master_generations() const override;
  void begin_step() override;
  void commit() override;
  void abandon() noexcept override;

 private:
  std::vector<FlatParam*> flats_;
  std::vector<ParamShard>& shards_;
  ShardStore* store_;
};

// ShardingEngine::gradients(): the trainable flat parameters that hold a gradient.
class FlatParamGradients final : public GradientShards {
 public:
  std::vector<FlatParam*> flats;
  size_t size() const override { return flats.size(); }
  const at::Tensor& read(size_t i) override { return flats[i]->grad_for_read(); }
  void prefetch(size_t i) override { flats[i]->prefetch_grad(); }
  bool offloaded(size_t i) const override { return flats[i]->grad_offloaded(); }
  void release(size_t i) override { flats[i]->release_grad(); }
  void scale(size_t i, double factor) override { flats[i]->scale_grad(factor); }
};

struct ShardingEngineImpl {
  ShardingEngineImpl(Session& session, std::shared_ptr<torch::nn::Module> model, ShardingOptions options,
                     ShardedInitState* init);

  // --- construction (engine.cpp) ---
  void setup_groups();
  void discover_units();
  std::unordered_set<const torch::nn::Module*> auto_wrap_picks() const;
  bool adopt(ShardedUnit* u, const UnitSlots& slots);
  void check_same_structure();
  void check_parameters() const;
  void init_flat_params();

  // --- offload stores (engine_offload.cpp) ---
  // offload.params: creates the store (shard_store.h), after checking every flat parameter can
  // move there (init_flat_params moves each as it is built).
  void start_param_store();
  // Moves the unit's shards into the parameter store (if any), agreed on by every rank.
  void store_unit_shards(ShardedUnit* u);
  void log_param_store() const;
  // Reads the shards of the unit the schedule gathers after `u` ahead (offload.params).
  void read_ahead(const ShardedUnit& u);
  // offload.grads: creates the gradient store and moves every trainable flat's gradient there.
  void start_grad_store();
  // Writes back and drops every resident offloaded shard, parameters and gradients (after a
  // step, a checkpoint, a load).
  void release_offloaded_shards();
  void release_offloaded_shards_noexcept() noexcept;  // keeps what fails to write resident

  // Module buffers (buffers.h, options.buffer_sync): BROADCAST before every forward, AVERAGE
  // after every step.
  void sync_buffers_before_forward();
  // engine.step's parts: the optimizer's step over this rank's shards (through the pager when they
  // are offloaded); the local clean-up after it, failed or not; and the agreement of every rank on
  // whether it failed anywhere (rethrows this rank's error, or names the failed ranks).
  void optimizer_step(ShardingEngine& engine, ShardedOptimizer& optimizer);
  void after_optimizer_step(bool succeeded);
  void agree_on_step(const std::exception_ptr& failure);
  void sync_buffers_after_step();

  // --- the pass (engine_root.cpp) ---
  // The first pre-backward hook of a backward: queues finalize_backward and checks the unit order.
  void begin_backward();
  // The final callback of a backward: reduces what never fired, waits for every reduction.
  void finalize_backward();
  // At the loss (the root's first hook): units none of whose outputs the backward reaches will not
  // run backward; they reshard now and prefetch skips them (engine_graph.cpp).
  void mark_idle_units(const std::unordered_set<torch::autograd::Node*>& graph);
  // Hands gradient buffers the reduce-scatter stream read to retired_grads.
  void retire(std::vector<at::Tensor> buffers, const c10::Stream& compute);
  // Returns the engine to its state between steps after a forward or backward that threw (see
  // ShardingEngine::reset_after_error). `drop_grads`: also drop every gradient (buffers, pending
  // reductions, shards). Waits for the collectives in flight; never throws.
  void reset_after_error(bool drop_grads) noexcept;
  // UsageError when a backward started and did not finish (it threw): `what` names the caller.
  void require_finished_backward(const char* what) const;
  bool reshard_after_forward() const;
  // A backward pass through this engine is running (set by the first pre-backward hook, cleared by
  // the final callback). Still true after a backward that threw: LibTorch drops the final
  // callback of a failed graph task, so nothing cleared it.
  bool in_backward() const { return callback_queued; }

  // --- the unit-order check (unit_order.cpp) ---
  // Compares this forward's unit sequence across ranks (an all-gather of a hash and a length over
  // the host groups; a second one of the sequences only when they differ, to name the unit and the
  // ranks) and throws UsageError on every rank of the group alike when they differ. At the first
  // pre-backward hook: the shard group at once, the replicas without waiting (a late replica must
  // not hold the backward up), verified by finish_replica_order_check at the end of backward. At
  // the end of a forward without grad, and at the next forward after one with grad that no
  // backward followed (`where` says which): all ranks at once. Then the sequence becomes the
  // schedule's order (rerecord_prefetch_order).
  void check_unit_order_at_backward();
  void check_unit_order_now(const char* where);
  void finish_replica_order_check();
  void rerecord_prefetch_order();

  Session& session;
  std::shared_ptr<torch::nn::Module> model;
  ShardingOptions options;
  std::shared_ptr<Communicator> comm;  // all ranks, for the parameters' device
  std::shared_ptr<Communicator> shard_group;
  std::shared_ptr<Communicator> replicate_group;  // null when not replicated
  std::shared_ptr<Communicator> host_shard_group;      // the same groups on the host (groups.h)
  std::shared_ptr<Communicator> host_replicate_group;  // null when not replicated
  ShardedInitState* init = nullptr;  // units sharded at construction, adopted by discover_units
  // Declared before `units`: FlatParams report into it when destroyed. Shared with ShardedInit.
  std::shared_ptr<MemoryStats> mem = std::make_shared<MemoryStats>();
  // offload.params = CPU / NVME: where the shards live between uses (null otherwise). Declared
  // before `units`: their FlatParams point into it.
  std::unique_ptr<ShardStore> param_store;
  // offload.grads = CPU / NVME: where the gradient shards live from their reduction to the step.
  std::unique_ptr<ShardStore> grad_store;
  std::vector<std::unique_ptr<ShardedUnit>> units;  // root first, then pre-order
  ShardedUnit* root = nullptr;
  UnitSchedule schedule;
  // set_param_groups: every trainable parameter's assignment (flat order), and per trainable
  // flat (param_shards() order) its shard's element ranges.
  std::vector<ParamGroupAssignment> param_groups;
  std::vector<std::vector<ShardGroupRange>> shard_group_ranges;
  // The units this root forward ran, in order (ordinals; a unit called twice appears twice),
  // recomputations excluded. unit_order.cpp checks it across ranks and re-records the schedule's
  // order from it.
  std::vector<int32_t> forward_sequence;
  bool sequence_checked = false;  // for this forward
  struct OrderExchange {
    std::shared_ptr<Work> work;  // null when none is in flight
    at::Tensor mine, all;
    Communicator* group = nullptr;
    std::vector<int32_t> sequence;  // what was exchanged (forward_sequence may move on)
  };
  OrderExchange replica_order_check;
  bool root_active = false;
  bool callback_queued = false;
  bool forward_failed = false;
  // engine.step succeeded here but failed on another rank: a retry only joins the agreement.
  bool step_awaiting_peers = false;  // abort_root ran; the memory phase is still the failing unit's
  uint64_t backward_passes = 0;  // completed backward passes: tells a stale input hook apart
  // The callers' memory phases, restored when engine.forward / the backward pass ends.
  int outer_forward_phase = 0;
  int outer_backward_phase = 0;
  int no_sync_depth = 0;
  std::vector<ShardedUnit*> reducing;          // unit whose reduce-scatter is in flight
  std::vector<ShardedUnit*> replica_reducing;  // units whose replica all-reduce is in flight
  CommCounters counters;
  // CUDA: the all-gather and reduce-scatter side streams (disabled on CPU). Every entry into a side
  // stream first makes it wait for the compute stream, so memory freed after compute used it is
  // safe to reuse there, and the shards the optimizer wrote are up to date.
  std::unique_ptr<DeviceStreams> streams;
  // Gradient buffers (compute-stream memory) read by the reduce-scatter stream, kept until it is
  // done with them.
  ReleaseQueue retired_grads;
  // Offloaded shards dropped after a gather, kept until the all-gather stream is done with them.
  ReleaseQueue released_shards;
  std::unique_ptr<AutocastGuard> autocast;  // alive during the root forward when options.autocast
  FlatParamGradients gradients;
};

}  // namespace detail
}  // namespace zeroshard
