#pragma once
// Private state of ShardingEngine, shared by engine.cpp (construction, optimizer side) and
// engine_hooks.cpp (forward/backward lifecycle).

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "groups.h"
#include "zeroshard/engine/autocast.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/flat_param.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zeroshard {
namespace detail {

struct UnitState {
  std::string name;  // module path in the model; "<root>" for the model itself
  int ordinal = 0;   // index in ShardingEngineImpl::units
  torch::nn::Module* module = nullptr;
  bool is_root = false;
  bool adopted = false;  // its flat parameters were built (and sharded) by a ShardedInit
  detail::ShardingEngineImpl* engine = nullptr;
  std::vector<std::unique_ptr<FlatParam>> flats;  // trainable first, then frozen
  std::vector<std::shared_ptr<Work>> gathers;     // in flight
  bool gathered_on_side_stream = false;  // a gather ran on the all-gather stream; compute has not waited
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;  // kept alive for their hooks
  int forward_index = -1;  // position in the recorded forward order; -1 when not in it
  // Memory phases (zeroshard/core/host_memory.h) its allocations are recorded under.
  int phase_forward = 0, phase_backward = 0, phase_recompute = 0;
  // Per backward pass:
  bool pre_backward_done = false;
  bool post_backward_done = false;
  int grads_expected = 0;
  int grads_seen = 0;
  // Units with frozen parameters end their backward when, besides their parameters' gradients,
  // the gradients of the inputs they were called with are complete (mark_input). Per pass;
  // `inputs_opaque`: a call had arguments that may hide tensors (then: at the end of backward).
  int inputs_watched = 0;
  int inputs_seen = 0;
  bool inputs_opaque = false;
  // What this pass's backward will run, read from its autograd graph (engine_graph.cpp, "What a
  // backward runs"). Recorded by the forward: the gradient functions of the outputs hooked and of
  // the inputs watched; `outputs_untracked`: an output needing a gradient had none (a leaf);
  // `forward_checkpoints`: checkpointed runs started inside the unit's forward. Decided when the
  // backward reaches the unit: the parameter gradients and watched inputs due (-1: all of them,
  // when the graph cannot tell); `idle`: no output of the unit is in the backward's graph.
  std::vector<std::weak_ptr<torch::autograd::Node>> output_nodes, input_nodes;
  bool outputs_untracked = false;
  uint64_t checkpoints_before_forward = 0;
  bool forward_checkpoints = false;
  int grads_due = -1;
  int inputs_due = -1;
  bool idle = false;
  bool has_frozen() const;
  void reset_pass();
};

// Keeps a weak reference to a gradient function recorded by a forward (engine_graph.cpp).
void remember_node(std::vector<std::weak_ptr<torch::autograd::Node>>* nodes,
                   const std::shared_ptr<torch::autograd::Node>& node);

// The engine's side of an offloaded optimizer step (ShardPager, optimizer.h): shard i of the step
// is trainable flat parameter i.
class FlatParamPager final : public ShardPager {
 public:
  FlatParamPager(std::vector<FlatParam*> flats, std::vector<ParamShard>& shards);
  int64_t numel(size_t i) const override;
  void acquire(size_t i, bool read, bool grad) override;
  void release(size_t i, bool modified) override;
  void prefetch(size_t i, bool read) override;

 private:
  std::vector<FlatParam*> flats_;
  std::vector<ParamShard>& shards_;
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
       ShardedInitImpl* init);

  // --- construction (engine.cpp) ---
  void setup_groups();
  void discover_units();
  std::unordered_set<const torch::nn::Module*> auto_wrap_picks() const;
  bool adopt(detail::UnitState* u, const detail::UnitSlots& slots);
  void check_same_structure();
  void check_parameters() const;
  void init_flat_params();
  // offload.params: creates the store (shard_store.h), after checking every flat parameter can
  // move there (init_flat_params moves each as it is built).
  void start_param_store();
  // Moves the unit's shards into the parameter store (if any), agreed on by every rank.
  void store_unit_shards(detail::UnitState* u);
  void log_param_store() const;
  // Starts reading the shards of the unit the engine will gather after `u` (forward order, or
  // reverse during backward), so its load overlaps this unit's compute.
  void read_ahead(detail::UnitState* u);
  // offload.grads: creates the gradient store and moves every trainable flat's gradient there.
  void start_grad_store();
  // Writes back and drops every resident offloaded shard, parameters and gradients (after a
  // step, a checkpoint, a load).
  void release_offloaded_shards();
  void release_offloaded_shards_noexcept() noexcept;  // keeps what fails to write resident
  void install_grad_hooks();

  // Module buffers (buffers.h, options.buffer_sync): BROADCAST before every forward, AVERAGE
  // after every step.
  void sync_buffers_before_forward();
  void sync_buffers_after_step();

  // --- lifecycle (engine_hooks.cpp) ---
  void pre_forward(detail::UnitState* u);
  void post_forward(detail::UnitState* u, const std::vector<at::Tensor>& outputs);
  at::Tensor mark_input(detail::UnitState* u, const at::Tensor& x);
  void input_grad_ready(detail::UnitState* u, uint64_t pass);
  // post_backward once the parameters' gradients and the watched inputs' are all complete.
  void maybe_post_backward(detail::UnitState* u);
  uint64_t backward_passes = 0;  // completed backward passes: tells a stale input hook apart
  void pre_backward(detail::UnitState* u);
  // Reads the running backward's graph when it reaches `u` (`first`: the first unit it reaches
  // in this pass): see "What a backward runs" in engine_graph.cpp.
  void read_backward_graph(detail::UnitState* u, bool first);
  // The first unit at or before `forward_index` in forward order that runs backward this pass
  // (skips idle units); -1 when none.
  int backward_next(int forward_index) const;
  // Parameter `slot` of `f` (a flat parameter of `u`) has its gradient in .grad.
  void on_grad_ready(detail::UnitState* u, FlatParam* f, size_t slot);
  void post_backward(detail::UnitState* u);
  void finalize_backward();
  void issue_gather(detail::UnitState* u);
  // On the reduce-scatter stream (which must be current), `compute` being the stream that
  // produced the gradients: advance_reduce moves the unit's reduction past its reduce-scatter
  // (starting the replica all-reduce, if any, which then completes by the end of backward);
  // finish_reduce completes it. Both hand freed gradient buffers to retired_grads.
  void advance_reduce(detail::UnitState* u, const c10::Stream& compute);
  void finish_reduce(detail::UnitState* u, const c10::Stream& compute);
  void retire(std::vector<at::Tensor> buffers, const c10::Stream& compute);
  void wait_gather(detail::UnitState* u);
  // Makes the current (compute) stream wait for the unit's gathers in flight, if any.
  void complete_gather(detail::UnitState* u);
  void prefetch(int forward_index);
  void reshard(detail::UnitState* u);
  int inflight_gathers() const;
  bool reshard_after_forward() const;
  // A backward pass through this engine is running (set by the first pre-backward hook, cleared by
  // the final callback). Still true after a backward that threw: LibTorch drops the final
  // callback of a failed graph task, so nothing cleared it.
  bool in_backward() const { return callback_queued; }
  // Returns the engine to its state between steps after a forward or backward that threw (see
  // ShardingEngine::reset_after_error). `drop_grads`: also drop every gradient (buffers, pending
  // reductions, shards). Waits for the collectives in flight; never throws.
  void reset_after_error(bool drop_grads) noexcept;
  // The unit-order check (unit_order.cpp): compares this forward's unit sequence across ranks (an
  // all-gather of a hash and a length over the host groups; a second one of the sequences only
  // when they differ, to name the unit and the ranks) and throws UsageError on every rank of the
  // group alike when they differ. At the first pre-backward hook: the shard group at once (its
  // ranks are in step: the backward's first collective waits for them anyway), the replicas
  // without waiting (a late replica must not hold the backward up), verified by
  // finish_replica_order_check at the end of backward. At the end of a forward without grad: all
  // ranks at once. Then the sequence becomes the prefetch order (rerecord_prefetch_order).
  void check_unit_order_at_backward();
  void check_unit_order_without_grad();
  void finish_replica_order_check();
  void rerecord_prefetch_order();
  // UsageError when a backward started and did not finish (it threw): `what` names the caller.
  void require_finished_backward(const char* what) const;

  Session& session;
  std::shared_ptr<torch::nn::Module> model;
  ShardingOptions options;
  std::shared_ptr<Communicator> comm;  // all ranks, for the parameters' device
  std::shared_ptr<Communicator> shard_group;
  std::shared_ptr<Communicator> replicate_group;  // null when not replicated
  std::shared_ptr<Communicator> host_shard_group;      // the same groups on the host (groups.h)
  std::shared_ptr<Communicator> host_replicate_group;  // null when not replicated
  detail::ShardedInitImpl* init = nullptr;  // units sharded at construction, adopted by discover_units
  // Declared before `units`: FlatParams report into it when destroyed. Shared with ShardedInit.
  std::shared_ptr<MemoryStats> mem = std::make_shared<MemoryStats>();
  // offload.params = CPU / NVME: where the shards live between uses (null otherwise). Declared
  // before `units`: their FlatParams point into it.
  std::unique_ptr<ShardStore> param_store;
  // offload.grads = CPU / NVME: where the gradient shards live from their reduction to the step.
  std::unique_ptr<ShardStore> grad_store;
  std::vector<std::unique_ptr<detail::UnitState>> units;  // root first, then pre-order
  // set_param_groups: every trainable parameter's assignment (flat order), and per trainable
  // flat (param_shards() order) its shard's element ranges.
  std::vector<ParamGroupAssignment> param_groups;
  std::vector<std::vector<ShardGroupRange>> shard_group_ranges;
  detail::UnitState* root = nullptr;
  std::vector<detail::UnitState*> forward_order;
  bool recording_order = true;  // until the first backward completes
  // The units this root forward ran, in order (ordinals; a unit called twice appears twice),
  // recomputations excluded. unit_order.cpp checks it across ranks and re-records the prefetch
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
  bool forward_failed = false;  // abort_root ran; the memory phase is still the failing unit's
  // The callers' memory phases, restored when engine.forward / the backward pass ends.
  int outer_forward_phase = 0;
  int outer_backward_phase = 0;
  int no_sync_depth = 0;
  std::vector<detail::UnitState*> reducing;          // unit whose reduce-scatter is in flight
  std::vector<detail::UnitState*> replica_reducing;  // units whose replica all-reduce is in flight
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
