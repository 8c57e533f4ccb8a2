// SPDX-License-Identifier: Apache-2.0
// The pass as a whole: the root forward (engine.forward), the start and the end of a backward
// (the final callback reduces what never fired and waits for every reduction), the way back to a
// usable engine after a forward or backward that threw, what the units see of the engine
// (EngineUnitHost), and the optimizer step run during backward.
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/engine.h>

#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "engine_internal.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/host_memory.h"

namespace zeroshard {

namespace detail {

// Gradient buffers retired to the reduce-scatter stream that may be outstanding before the compute
// stream waits for the oldest (bounds their memory when the host runs ahead of the GPU).
constexpr size_t kMaxRetiredGradBuffers = 2;

bool ShardingEngineImpl::reshard_after_forward() const {
  return options.strategy == ShardingStrategy::kFullShard || options.strategy == ShardingStrategy::kHybridShard;
}

void ShardingEngineImpl::begin_backward() {
  ZS_REQUIRE(overlap.stepped == 0, UsageError, "a backward started while the step begun during the last one "
             "(step_during_backward) has updated ", overlap.stepped, " shards with its gradients: step() or "
             "zero_grad() must come first (call step_during_backward before the last micro-batch's backward only)");
  outer_backward_phase = current_memory_phase();
  callback_queued = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
  // Before the backward's first collective: every rank ran the same units (unit_order.cpp).
  if (order->at_backward()) rerecord_prefetch_order();
}

void ShardingEngineImpl::mark_idle_units(const std::unordered_set<torch::autograd::Node*>& graph) {
  for (auto& u : units) {
    if (!u->unreached_by(graph, *root)) continue;
    u->pass.idle = true;
    if (options.strategy != ShardingStrategy::kNoShard) u->reshard();
  }
}

void ShardingEngineImpl::rerecord_prefetch_order() {
  if (schedule.recording()) return;  // the first forward records the order as it goes (pre_forward)
  // The prefetch order becomes what this forward ran (first calls only).
  std::vector<ShardedUnit*> ran;
  std::vector<bool> seen(units.size(), false);
  for (int32_t o : order->sequence()) {
    if (!seen[o]) ran.push_back(units[o].get());
    seen[o] = true;
  }
  if (!schedule.rerecord(std::move(ran))) return;
  // A unit the old order prefetched but this forward never ran is still gathered: free it now
  // (every rank issued that gather, so waiting for it completes).
  if (reshard_after_forward()) {
    for (auto& u : units) {
      if (!seen[u->ordinal] && !u->is_root) u->reshard();
    }
  }
}

void ShardingEngineImpl::retire(std::vector<at::Tensor> buffers, const c10::Stream& compute) {
  if (!buffers.empty()) retired_grads.release_after(std::move(buffers), streams->mark(streams->reduce_scatter()));
  if (retired_grads.poll() > kMaxRetiredGradBuffers) retired_grads.release_after_wait(compute, kMaxRetiredGradBuffers);
}

void ShardingEngineImpl::finalize_backward() {
  // Units whose parameters did not all receive gradients (unused this step) are reduced now, with
  // zeros for the missing ones, so every rank issues the same collectives.
  for (auto& u : units) {
    if (u->pass.pre_backward_done && !u->pass.post_backward_done) u->post_backward();
  }
  // Replicas that ran different units paired their all-reduces wrongly: say so before their
  // results become gradients.
  order->finish_replicas();
  const c10::Stream compute = streams->current();
  if (no_sync_depth == 0) {
    streams->wait(streams->reduce_scatter(), compute);
    {
      DeviceStreams::Use on_reduce_scatter(*streams, streams->reduce_scatter());
      for (auto& u : units) u->reduce_finish(compute);
    }
    // The optimizer, clipping and the next step read the gradient shards on the compute stream.
    streams->wait(compute, streams->reduce_scatter());
  }
  // Offloaded gradients were written behind the backward: a failed write fails it, on every rank
  // (the values stay in memory until reset_after_error() drops this step's gradients).
  if (stores.grads() != nullptr) {
    io_on_every_rank(*session.world(), "writing the gradient shards behind the backward", "zs.offload.grads.flush",
                     [&] { stores.grads()->flush(); });
  }
  retired_grads.release_after_wait(compute);
  for (auto& u : units) {
    if (options.strategy != ShardingStrategy::kNoShard) u->reshard();
    u->reset_pass();
  }
  drop_secondaries();
  ++backward_passes;
  reducing.clear();
  replica_reducing.clear();
  callback_queued = false;
  schedule.stop_recording();
  set_memory_phase(outer_backward_phase);
}

void ShardingEngineImpl::reset_after_error(bool drop_grads) noexcept {
  // Each step below waits for collectives this rank issued before the failure; ranks that failed
  // at the same point issued the same ones, so every wait completes.
  const c10::Stream compute = streams->current();
  // A step begun during the failed backward: its shards get their values and state back.
  try {
    abandon_overlap();
  } catch (...) {
    overlap.disarm();
  }
  order->abandon();
  for (auto& u : units) u->abandon_gathers();
  if (drop_grads) {
    try {
      // Reductions ran on the reduce-scatter stream: compute must not reuse their memory before.
      streams->wait(compute, streams->reduce_scatter());
      retired_grads.release_after_wait(compute);
    } catch (...) {
    }
    for (auto& u : units) {
      for (auto& f : u->flats) {
        f->abandon_reduce();
        f->drop_grad_shard();
      }
    }
  }
  for (auto& u : units) {
    for (auto& f : u->flats) {
      try {
        if (!f->aliased()) f->free_full();  // NO_SHARD gathers again at the next forward
      } catch (...) {
      }
    }
    u->reset_pass();
  }
  drop_secondaries();
  ++backward_passes;
  reducing.clear();
  replica_reducing.clear();
  root_active = false;
  autocast.reset();
  if (callback_queued) set_memory_phase(outer_backward_phase);
  if (forward_failed) set_memory_phase(outer_forward_phase);
  callback_queued = false;
  forward_failed = false;
}

// hpZ's slices hold the values of the forward they were kept at; every rank drops them at the
// same points (the end of a backward, a forward's start, a step, a reset), so the next gathers of
// a unit are of one kind on every rank.
void ShardingEngineImpl::drop_secondaries() noexcept {
  for (auto& u : units) {
    for (auto& f : u->flats) f->drop_secondary();
  }
}

void ShardingEngineImpl::require_finished_backward(const char* what) const {
  ZS_REQUIRE(!in_backward(), UsageError, what, ": the last backward did not finish (it threw), so the gradients "
             "are partial; skip this step: the next engine.forward() (or engine.reset_after_error()) drops them "
             "and makes the engine usable again");
}

// ---- the units' host ----------------------------------------------------------------------------

const ShardingOptions& EngineUnitHost::options() const { return engine_.options; }
DeviceStreams& EngineUnitHost::streams() { return *engine_.streams; }
CommCounters& EngineUnitHost::counters() { return engine_.counters; }
UnitSchedule& EngineUnitHost::schedule() { return engine_.schedule; }
const ShardedUnit& EngineUnitHost::root() const { return *engine_.root; }
bool EngineUnitHost::in_backward() const { return engine_.in_backward(); }
bool EngineUnitHost::forward_running() const { return engine_.root_active; }
uint64_t EngineUnitHost::backward_passes() const { return engine_.backward_passes; }
bool EngineUnitHost::reduces_gradients() const { return engine_.no_sync_depth == 0; }
bool EngineUnitHost::reshard_after_forward() const { return engine_.reshard_after_forward(); }

void EngineUnitHost::forward_started(const ShardedUnit& u) { engine_.order->record(u.ordinal); }

void EngineUnitHost::backward_started(const ShardedUnit& u, const std::unordered_set<torch::autograd::Node*>* graph) {
  engine_.begin_backward();
  if (u.is_root && graph != nullptr) engine_.mark_idle_units(*graph);
}

void EngineUnitHost::gathers_starting(ShardedUnit& u) { engine_.stores.load_for_gather(u); }

void EngineUnitHost::gathers_started(const ShardedUnit& u) {
  if (engine_.stores.params() != nullptr) engine_.stores.read_ahead(engine_.schedule.next_after(u, in_backward()));
}

void EngineUnitHost::gathers_complete(ShardedUnit& u) { engine_.stores.release_gathered(u, *engine_.streams); }

void EngineUnitHost::reduction_started(ShardedUnit& u, const c10::Stream& compute) {
  for (ShardedUnit* p : engine_.reducing) p->reduce_advance(compute);
  engine_.reducing.assign(1, &u);
}

void EngineUnitHost::replica_reduction_pending(ShardedUnit& u) { engine_.replica_reducing.push_back(&u); }

void EngineUnitHost::retire(std::vector<at::Tensor> buffers, const c10::Stream& compute) {
  engine_.retire(std::move(buffers), compute);
}

}  // namespace detail

void ShardingEngine::begin_root() {
  ZS_REQUIRE(!impl_->root_active, UsageError, "engine.forward() called inside another engine.forward()");
  if (impl_->in_backward()) {
    // Only a backward that threw leaves this set at a forward (a successful one clears it at
    // its end); every rank that threw at the same point resets alike.
    ZS_LOG(kWarn) << "the last backward did not finish (it threw): dropping the gradients since the last "
                     "step and resharding every unit before this forward";
    impl_->reset_after_error(/*drop_grads=*/true);
  } else if (impl_->forward_failed) {
    impl_->reset_after_error(/*drop_grads=*/false);
  } else if (impl_->order->unchecked()) {
    // The last forward ran with grad and no backward followed it (an evaluation without
    // NoGradGuard, or two forwards before one backward): its order is checked now. When it
    // differed, units one rank ran and another did not may still be gathered on some ranks only:
    // every rank reshards every unit, so the next forward starts alike everywhere.
    try {
      if (impl_->order->now("at the forward after a forward with grad that no backward followed")) {
        impl_->rerecord_prefetch_order();
      }
    } catch (...) {
      impl_->order->begin_forward();
      for (auto& u : impl_->units) u->reshard();
      throw;
    }
  }
  impl_->order->begin_forward();
  impl_->drop_secondaries();
  impl_->root_active = true;
  impl_->outer_forward_phase = current_memory_phase();
  if (impl_->options.autocast) {
    impl_->autocast = std::make_unique<AutocastGuard>(impl_->groups.comm->backend() == std::string("nccl")
                                                          ? c10::DeviceType::CUDA
                                                          : c10::DeviceType::CPU,
                                                      impl_->options.autocast_dtype);
  }
  // From here on a failure (the root's gather, reading its offloaded shards) is a failed forward.
  try {
    impl_->sync_buffers_before_forward();
    impl_->root->pre_forward();
  } catch (...) {
    abort_root();
    throw;
  }
}

void ShardingEngine::abort_root() noexcept {
  // The memory phase stays where the forward failed, for an out-of-memory report, until the next
  // forward or reset_after_error restores the caller's. A forward produces no gradients: those
  // accumulated before it (no_sync micro-batches, earlier backward passes) stay.
  impl_->root_active = false;
  impl_->autocast.reset();
  impl_->forward_failed = true;
  try {
    for (auto& u : impl_->units) u->reshard();
  } catch (...) {
  }
}

void ShardingEngine::reset_after_error() {
  ZS_REQUIRE(!impl_->root_active, UsageError, "reset_after_error() called inside engine.forward()");
  impl_->reset_after_error(/*drop_grads=*/true);
}

void ShardingEngine::end_root(const std::vector<at::Tensor>& outputs) {
  impl_->root_active = false;
  impl_->autocast.reset();
  impl_->root->post_forward(outputs);
  set_memory_phase(impl_->outer_forward_phase);
  // No backward follows a forward without grad: its unit sequence is checked now.
  if (!c10::GradMode::is_enabled() && impl_->order->now("at the end of a forward without grad")) {
    impl_->rerecord_prefetch_order();
  }
}

// ---- the optimizer step run during backward (ShardingEngine::step_during_backward, engine.h) ----
// Each unit's shards go to a thread of the engine's (overlap_step.h) as soon as their gradients are
// reduced; step() keeps the result if the gradients were not changed since, and otherwise drops
// it and steps them again.

namespace detail {

void EngineUnitHost::gradients_reduced(ShardedUnit& u) { engine_.post_reduced_shards(u); }

ParamShard ShardingEngineImpl::param_shard(FlatParam& f, size_t k) const {
  ParamShard s{f.shard_offloaded() ? at::Tensor() : f.shard(), f.grad_shard(), f.name(), {}, f.values_replaced()};
  if (!shard_group_ranges.empty()) s.groups = shard_group_ranges.at(k);
  return s;
}

std::vector<ParamShard> ShardingEngineImpl::shard_list() const {
  std::vector<ParamShard> out;
  for (const auto& u : units) {
    for (const auto& f : u->flats) {
      if (f->trainable()) out.push_back(param_shard(*f, out.size()));
    }
  }
  return out;
}

void ShardingEngineImpl::post_reduced_shards(ShardedUnit& u) {
  if (!overlap.armed() || no_sync_depth > 0) return;
  for (auto& f : u.flats) {
    const auto at = overlap.position.find(f.get());
    if (at == overlap.position.end() || overlap.posted[at->second]) continue;
    // Not final yet (a replica all-reduce in flight), or no gradient at all this step.
    if (f->has_grad_buffer() || f->reduce_pending() || !f->grad_shard().defined()) continue;
    const size_t k = at->second;
    overlap.posted[k] = true;
    overlap.read_as[k] = {f->grad_shard().unsafeGetTensorImpl(), static_cast<int64_t>(f->grad_shard()._version())};
    ++overlap.stepped;
    ++overlap_stats.shards;
    // On a GPU the reduction was queued on the reduce-scatter stream (current here): the worker
    // waits for it on the host before it copies the gradient down.
    std::shared_ptr<StreamMark> reduced;
    if (streams->enabled()) reduced = streams->mark(streams->reduce_scatter());
    overlap.worker.post([opt = overlap.optimizer, k, shard = param_shard(*f, k), reduced, device = session.device()] {
      const c10::DeviceGuard on_device(device);  // the rank's GPU, not the thread's default one
      while (reduced && !reduced->done()) std::this_thread::yield();
      opt->step_shard(k, shard);
    });
  }
}

void ShardingEngineImpl::settle_overlap() {
  if (!overlap.armed()) return;
  std::exception_ptr failed = overlap.worker.drain();
  if (failed && !overlap.failure) overlap.failure = failed;
}

void ShardingEngineImpl::check_overlap_grads(bool after_known_scale) {
  if (!overlap.armed()) return;
  for (auto& u : units) {
    for (auto& f : u->flats) {
      const auto at = overlap.position.find(f.get());
      if (at == overlap.position.end() || !overlap.posted[at->second]) continue;
      const at::Tensor& g = f->grad_shard();
      const std::pair<const void*, int64_t> now{g.defined() ? g.unsafeGetTensorImpl() : nullptr,
                                                g.defined() ? static_cast<int64_t>(g._version()) : -1};
      if (after_known_scale) {
        overlap.read_as[at->second] = now;
      } else if (now != overlap.read_as[at->second]) {
        overlap.changed = true;
      }
    }
  }
}

void ShardingEngineImpl::overlapped_step(ShardingEngine& engine, ShardedOptimizer& optimizer) {
  ShardedOptimizer& armed = *overlap.optimizer;
  ZS_REQUIRE(&optimizer == &armed, UsageError, "step(", optimizer.describe(), "): the step begun during backward "
             "(step_during_backward) is of another optimizer, ", armed.describe(), "; step that one, or zero_grad() "
             "to abandon it");
  settle_overlap();
  // A gradient changed in place other than through clip_grad_norm() / gradients() (e.g. through
  // param_shards()): not what the shard was stepped with.
  check_overlap_grads(/*after_known_scale=*/false);
  const std::exception_ptr failed = overlap.failure;
  const bool keep = !failed && overlap.gradients_unchanged();
  ++overlap_stats.steps;
  std::vector<ParamShard> shards = shard_list();
  overlap.disarm();
  if (keep) {
    armed.finish_shard_step(shards);
    return;
  }
  // The gradients the shards were stepped with are not the step's (clipped, unscaled), or an
  // update failed: back to the state before, and the whole step again.
  armed.abandon_shard_step(shards);
  ++overlap_stats.redone;
  if (failed) std::rethrow_exception(failed);
  optimizer_step(engine, optimizer);
}

void ShardingEngineImpl::abandon_overlap() {
  if (!overlap.armed()) return;
  settle_overlap();
  ShardedOptimizer& armed = *overlap.optimizer;
  ++overlap_stats.steps;
  ++overlap_stats.abandoned;
  std::vector<ParamShard> shards = shard_list();
  overlap.disarm();
  c10::AutoGradMode no_grad(false);
  armed.abandon_shard_step(shards);
}

}  // namespace detail

void ShardingEngine::step_during_backward(ShardedOptimizer& optimizer) {
  detail::ShardingEngineImpl& im = *impl_;
  im.require_finished_backward("step_during_backward()");
  ZS_REQUIRE(!im.overlap.armed(), UsageError, "step_during_backward(", optimizer.describe(), "): a step begun "
             "during an earlier backward is still open; step() or zero_grad() ends it");
  ZS_REQUIRE(optimizer.steps_shards_during_backward(), UsageError, "step_during_backward: optimizer ",
             optimizer.describe(), " cannot step shards during backward; an optimizer with its state in host "
             "memory does (offload.optimizer = CPU)");
  ZS_REQUIRE(im.stores.params() == nullptr && im.stores.grads() == nullptr, UsageError,
             "step_during_backward needs the parameter and gradient shards in memory, but this engine offloads ",
             im.stores.params() != nullptr ? "the parameters (offload.params)" : "the gradients (offload.grads)");
  c10::AutoGradMode no_grad(false);
  optimizer.begin_shard_step(im.shard_list());
  size_t k = 0;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      if (f->trainable()) im.overlap.position[f.get()] = k++;
    }
  }
  im.overlap.posted.assign(k, false);
  im.overlap.read_as.assign(k, {nullptr, -1});
  im.overlap.optimizer = &optimizer;
}

ShardingEngine::OverlapStats ShardingEngine::overlap_stats() const { return impl_->overlap_stats; }

}  // namespace zeroshard
