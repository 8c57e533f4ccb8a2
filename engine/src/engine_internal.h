// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardingEngineImpl: the engine as the orchestrator of its parts. It owns the units (sharded_unit.h;
// each runs its own lifecycle and reaches the engine only through UnitHost), the schedule that
// orders and limits their gathers (unit_schedule.h), the offload stores (engine_offload.h) and the
// cross-rank unit-order check (unit_order.h), and keeps the state of the pass as a whole. Its
// methods live in engine.cpp (construction, the optimizer side) and engine_root.cpp (the root
// forward, the start and end of a backward, recovery after errors, the units' host).

#include <exception>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine_offload.h"
#include "flat_param.h"
#include "groups.h"
#include "overlap_step.h"
#include "sharded_unit.h"
#include "unit_host.h"
#include "unit_order.h"
#include "unit_schedule.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/engine/autocast.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"

namespace zeroshard {
namespace detail {

class ShardedInitState;
struct ShardingEngineImpl;

// The units' view of the engine (UnitHost over ShardingEngineImpl; engine_root.cpp).
class EngineUnitHost final : public UnitHost {
 public:
  explicit EngineUnitHost(ShardingEngineImpl& engine) : engine_(engine) {}
  const ShardingOptions& options() const override;
  DeviceStreams& streams() override;
  CommCounters& counters() override;
  UnitSchedule& schedule() override;
  const ShardedUnit& root() const override;
  bool in_backward() const override;
  bool forward_running() const override;
  uint64_t backward_passes() const override;
  bool reduces_gradients() const override;
  bool reshard_after_forward() const override;
  void forward_started(const ShardedUnit& u) override;
  void backward_started(const ShardedUnit& u, const std::unordered_set<torch::autograd::Node*>* graph) override;
  void gathers_starting(ShardedUnit& u) override;
  void gathers_started(const ShardedUnit& u) override;
  void gathers_complete(ShardedUnit& u) override;
  void reduction_started(ShardedUnit& u, const c10::Stream& compute) override;
  void replica_reduction_pending(ShardedUnit& u) override;
  void retire(std::vector<at::Tensor> buffers, const c10::Stream& compute) override;
  void gradients_reduced(ShardedUnit& u) override;

 private:
  ShardingEngineImpl& engine_;
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
  // On a CPU run, raises the host memory cache to hold the per-step buffers of the largest unit
  // (MemoryOptions::host_cache_grows).
  void grow_host_cache();

  // --- the pass (engine_root.cpp) ---
  // The first pre-backward hook of a backward: queues finalize_backward and checks the unit order.
  void begin_backward();
  // The final callback of a backward: reduces what never fired, waits for every reduction.
  void finalize_backward();
  void drop_secondaries() noexcept;  // hpZ (engine_root.cpp)
  // At the loss (the root's first hook): units none of whose outputs the backward reaches will not
  // run backward; they reshard now and prefetch skips them.
  void mark_idle_units(const std::unordered_set<torch::autograd::Node*>& graph);
  // The unit-order check ran (true from the checks): the sequence becomes the schedule's order.
  void rerecord_prefetch_order();
  // Hands gradient buffers the reduce-scatter stream read to retired_grads.
  void retire(std::vector<at::Tensor> buffers, const c10::Stream& compute);

  // --- the step during backward (engine_root.cpp) ---
  // Trainable flat `f` at position `k` of param_shards(), as the optimizer sees it.
  ParamShard param_shard(FlatParam& f, size_t k) const;
  std::vector<ParamShard> shard_list() const;  // ShardingEngine::param_shards()
  // `u`'s final gradients: its shards go to the worker.
  void post_reduced_shards(ShardedUnit& u);
  // Before the gradients are scaled in place: the worker has finished reading them.
  void settle_overlap();
  // The posted shards' gradients against the versions the worker read: changed in place since
  // (a factor not recorded) sets overlap.changed; after a recorded factor was applied, the
  // versions now become the ones expected.
  void check_overlap_grads(bool after_known_scale);
  // The step begun during backward, ended at step(): completed, or restored and redone.
  void overlapped_step(ShardingEngine& engine, ShardedOptimizer& optimizer);
  // Restores what the step begun during backward updated (zero_grad, reset_after_error).
  void abandon_overlap();
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

  Session& session;
  std::shared_ptr<torch::nn::Module> model;
  ShardingOptions options;
  ShardGroups groups;  // all ranks, the shard group, the replicas; on the device and on the host
  ShardedInitState* init = nullptr;  // units sharded at construction, adopted by discover_units
  // Declared before `units`: FlatParams report into it when destroyed. Shared with ShardedInit.
  std::shared_ptr<MemoryStats> mem = std::make_shared<MemoryStats>();
  // offload.params / offload.grads = CPU / NVME: where the shards live between uses. Declared
  // before `units`: their FlatParams point into it.
  OffloadStores stores;
  EngineUnitHost host{*this};  // what the units see of the engine
  std::vector<std::unique_ptr<ShardedUnit>> units;  // root first, then pre-order
  ShardedUnit* root = nullptr;
  UnitSchedule schedule;
  // set_param_groups: every trainable parameter's assignment (flat order), and per trainable
  // flat (param_shards() order) its shard's element ranges.
  std::vector<ParamGroupAssignment> param_groups;
  std::vector<std::vector<ShardGroupRange>> shard_group_ranges;
  std::unique_ptr<UnitOrderCheck> order;  // made once the groups and the units exist
  bool root_active = false;
  bool callback_queued = false;
  bool forward_failed = false;  // abort_root ran; the memory phase is still the failing unit's
  // engine.step succeeded here but failed on another rank: a retry only joins the agreement.
  bool step_awaiting_peers = false;
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
  std::unique_ptr<AutocastGuard> autocast;  // alive during the root forward when options.autocast
  FlatParamGradients gradients;
  // step_during_backward: last, so that its thread stops before anything it reads is destroyed.
  ShardingEngine::OverlapStats overlap_stats;
  OverlappedStep overlap;
};

}  // namespace detail
}  // namespace zeroshard
