// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardingEngine: fully sharded data parallelism (ZeRO-3 / FSDP) over a LibTorch module.
//
//   zeroshard::ShardingEngine engine(session, model, run.sharding);   // run = zeroshard::resolve(config)
//   auto opt = zeroshard::make_optimizer(run.optimizer);
//   for (...) {
//     auto loss = engine.forward([&] { return loss_fn(model->forward(x), y); });
//     loss.backward();                 // gradients are reduce-scattered into fp32 shards
//     engine.clip_grad_norm(1.0);      // global norm across all shards
//     engine.step(*opt);               // optimizer on this rank's shards only
//     engine.zero_grad();
//   }
//
// Units are the modules declared with zeroshard::Unit<Impl> holders (see unit.h) and those picked
// by the auto-wrap policy; the model itself is the root unit and owns every parameter no other
// unit owns (including parameters shared between units, e.g. tied embedding/output weights).
// Each unit's parameters become one FlatParam (plus one for its frozen parameters, which get no
// gradient memory). Strategies:
//   FULL_SHARD     gather before forward, free after; gather again before backward; reduce-scatter
//                  gradients after backward, free.
//   SHARD_GRAD_OP  as FULL_SHARD, but parameters stay gathered from forward until after backward.
//   NO_SHARD       parameters replicated (views of the replica), gradients all-reduced (DDP).
//   HYBRID_SHARD   FULL_SHARD inside groups of hybrid_group_size ranks, replicated across groups
//                  (gradients reduce-scattered in the group, then all-reduced across groups).
// Gradients are averaged over all ranks: each rank's loss should be the mean over its own part of
// the global batch. Collectives are issued in the same order on every rank; all ranks must build
// the same model (checked at construction by a structure hash, naming the first difference).
// Not thread-safe: one training thread per engine. The engine must outlive autograd graphs built
// through it. After the engine is destroyed the model's parameters are not usable (FULL_SHARD
// frees them); take full_state_dict() first.
// Gradients live in the engine's flat shards, never in the parameters' .grad (which holds a
// meta-device placeholder, so that torch::optim or torch::nn::utils::clip_grad_norm_ over
// model->parameters() fail loudly): use a ShardedOptimizer with step(), clip_grad_norm() and
// param_shards().

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/core/session.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/engine/options.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/engine/unit.h"

namespace zeroshard {

class ShardedInit;
class ShardStore;
namespace detail {
struct ShardingEngineImpl;
}  // namespace detail

// What full_state_dict() returns where. Both gather one unit at a time, so the transient memory
// on top of the result is one unit's flat parameter.
struct StateDictOptions {
  bool rank0_only = false;      // only rank 0 gets the tensors; the others an empty map
  bool offload_to_cpu = false;  // tensors on the CPU (each unit copied there as it is gathered)
};

// Elements moved by the engine's collectives since the last reset, per rank (before the
// (N-1)/N wire factor): the ZeRO formulas count 3 x params for FULL_SHARD, 2 x for the others.
struct CommCounters {
  int64_t all_gather_elements = 0;
  int64_t all_gather_bytes = 0;  // what the parameter gathers delivered (quantized or encoded: their bytes)
  int64_t reduce_elements = 0;   // reduce-scatter, or 2 x for an all-reduce
  int64_t reduce_bytes = 0;      // what the reductions sent, the same way (quantized: their encoded bytes)
};

class ShardingEngine {
 public:
  ShardingEngine(Session& session, std::shared_ptr<torch::nn::Module> model, ShardingOptions options);
  // Adopts the units `init` sharded while the model was built (see sharded_init.h), with its
  // session and options; shards the rest (the root's own parameters). `init` stops sharding.
  ShardingEngine(ShardedInit& init, std::shared_ptr<torch::nn::Module> model);
  ~ShardingEngine();
  ShardingEngine(const ShardingEngine&) = delete;
  ShardingEngine& operator=(const ShardingEngine&) = delete;

  // Runs `fn` (which calls the model) as the root unit's forward: gathers the root's parameters
  // around it and hooks the returned tensors for backward. Returns what fn returns.
  template <typename Fn>
  auto forward(Fn&& fn) {
    begin_root();
    try {
      auto out = fn();
      std::vector<at::Tensor> tensors;
      detail::collect_tensors(out, tensors);
      end_root(tensors);
      return detail::cast_output(std::move(out), output_dtype());
    } catch (...) {
      abort_root();
      throw;
    }
  }

  // While alive, backward passes keep unsharded gradients and skip communication; the first
  // backward after it ends reduces everything accumulated (gradient accumulation with one
  // reduce-scatter per step, at the memory cost of unsharded gradients for every unit).
  class NoSync {
   public:
    explicit NoSync(ShardingEngine& e);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ShardingEngine& engine_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Scales every gradient shard so the global L2 norm is at most max_norm (as
  // torch::nn::utils::clip_grad_norm_); returns the norm before clipping. Collective. Reads the
  // norm on the host (one device synchronisation): clip_grad_norm_tensor does not.
  double clip_grad_norm(double max_norm);
  // The same without a host read: returns the global norm before clipping as a one-element double
  // tensor where the shard group's collectives run (the device with CUDA, else the CPU), and scales
  // the gradients on the device by min(1, max_norm / (norm + 1e-6)). max_norm = infinity measures
  // without clipping. The norm is NaN or infinity when some gradient is (or when a shard's fp32
  // norm overflows); then a NaN norm leaves the gradients unchanged and an infinite one zeroes them.
  at::Tensor clip_grad_norm_tensor(double max_norm);
  // One optimizer step on this rank's shards, then buffers are synchronised as
  // options().buffer_sync says. Throws UsageError if gradients are still pending (e.g. inside
  // no_sync).
  void step(ShardedOptimizer& optimizer);
  // Frees the gradient shards (the next backward allocates fresh ones). A step begun by
  // step_during_backward() and not completed by step() is abandoned: every shard it updated gets
  // its values and optimizer state back (a skipped step).
  void zero_grad();

  // Runs the next optimizer step during the next backward (the CPU optimizer overlapping the rest
  // of backward, as ZeRO-Offload does): call it before the backward of the last micro-batch before
  // step(), outside no_sync(). As each unit's gradients are reduced, `optimizer` updates its
  // shards on a thread of the engine's while backward goes on; step(optimizer) waits for it and
  // updates the rest. Exact: the optimizer keeps each shard's values and state as they were
  // beside the new ones until step() (ShardedOptimizer::begin_shard_step), and when
  // clip_grad_norm() or gradients().scale() changed the gradients afterwards (a factor other than
  // exactly 1) step() restores them and steps every shard again with the gradients as they are
  // then; zero_grad() without step() restores them (the step is skipped). The results are bit for
  // bit those of step() alone. A gradient changed in place any other way (through param_shards())
  // is noticed by its version counter and makes step() redo the step too. No other backward may
  // run before step() or zero_grad() (UsageError at its start). UsageError unless the optimizer steps shards during backward
  // (ShardedOptimizer::steps_shards_during_backward: state in host memory) and the parameter and
  // gradient shards stay in memory (offload.params = offload.grads = DEVICE).
  void step_during_backward(ShardedOptimizer& optimizer);
  struct OverlapStats {
    int64_t steps = 0;      // steps begun by step_during_backward (completed, redone or abandoned)
    int64_t shards = 0;     // shards updated during backward, over all of them
    int64_t redone = 0;     // steps step() restored and redid (gradients changed, or an update failed)
    int64_t abandoned = 0;  // steps zero_grad() or reset_after_error() restored (skipped)
  };
  OverlapStats overlap_stats() const;
  // After a forward or backward that threw (a user hook, an out-of-memory in a unit): waits for
  // the collectives the failed pass issued, drops every gradient accumulated since the last
  // zero_grad() (gradient buffers, pending reductions, gradient shards: a failed backward leaves
  // them partial), reshards every unit and clears the per-pass state. The next forward() does
  // this by itself (keeping the gradients after a failed forward, which made none), so calling it
  // is only needed to drop the gradients earlier. step() and clip_grad_norm() after a backward
  // that threw refuse to run until then. With several ranks, every rank must have failed at the
  // same point (a throw on one rank alone leaves the others waiting in a collective: let the
  // watchdog end the job).
  void reset_after_error();

  // This rank's trainable shards with their gradients, in a fixed order (with their parameter
  // groups' element ranges once set_param_groups() ran). With offload.params = CPU or NVME each
  // `param` is undefined: the values live in the shard store, and step() brings them in one at a
  // time. With offload.grads = CPU or NVME each `grad` is a placeholder on the meta device (same
  // shape; no data): clip_grad_norm, GradScaler::unscale_and_check(engine.gradients()) and step() bring the
  // gradients in.
  std::vector<ParamShard> param_shards();
  // This rank's gradient shards (those holding a gradient), for readers that scale them where they
  // live, such as GradScaler::unscale_and_check. Valid until the next backward or zero_grad().
  GradientShards& gradients();
  // Resolves per-parameter weight decay and lr scale (param_group.h) over every trainable
  // parameter and keeps each shard's ranges for param_shards(), so optimizer steps use them.
  // ConfigError as assign_param_groups. Not collective; every rank must pass the same options.
  void set_param_groups(const ParamGroupOptions& options);
  // Every trainable parameter's assignment, in flat order; empty before set_param_groups().
  const std::vector<ParamGroupAssignment>& param_groups() const;
  // Every parameter's full fp32 value by qualified name (tied parameters under each name), and
  // the buffers (this rank's). Collective over all ranks, gathered one unit at a time; see
  // StateDictOptions for rank 0 only and CPU copies.
  std::map<std::string, at::Tensor> full_state_dict(const StateDictOptions& options = {});

  const MemoryStats& memory() const;
  MemoryStats& memory();
  // offload.params = CPU / NVME: where the parameter shards live between uses (shard_store.h);
  // null when they stay resident.
  const ShardStore* param_store() const;
  // offload.grads = CPU / NVME: where the gradient shards live from their reduction to the step
  // (param_shards() then hands placeholders on the meta device; see flat_param.h); null otherwise.
  const ShardStore* grad_store() const;
  std::string memory_report() const;
  const CommCounters& comm_counters() const;
  void reset_comm_counters();

  // Every flat parameter, in a fixed order (units root first, then pre-order; trainable before
  // frozen): what checkpoints save and load (flat_shard.h).
  std::vector<FlatShard*> flat_shards();
  // This rank's index among the replicas of its shard (0 unless NO_SHARD / HYBRID_SHARD).
  int replica_rank() const;
  // This rank's index in its shard group: which shard of every flat parameter it holds.
  int shard_rank() const;
  const ShardingOptions& options() const;
  Session& session();
  torch::nn::Module& model();

  std::vector<std::string> unit_names() const;
  int64_t num_params() const;            // unpadded elements of all units (trainable + frozen)
  int64_t num_trainable_params() const;  // unpadded trainable elements
  int64_t num_padded_trainable_params() const;
  int shard_group_size() const;
  c10::ScalarType output_dtype() const;
  // param_dtype: the dtype units compute in. Floating inputs of the root are not cast by the
  // engine (fn captures them); cast them with x.to(engine.compute_dtype()) when it is not fp32.
  c10::ScalarType compute_dtype() const;

 private:
  explicit ShardingEngine(std::unique_ptr<detail::ShardingEngineImpl> impl);
  void begin_root();
  void end_root(const std::vector<at::Tensor>& outputs);
  void abort_root() noexcept;
  std::unique_ptr<detail::ShardingEngineImpl> impl_;
  int memory_source_ = 0;  // add_memory_source handle
};

}  // namespace zeroshard
