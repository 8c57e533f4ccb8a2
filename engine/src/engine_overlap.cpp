// SPDX-License-Identifier: Apache-2.0
// The optimizer step run during backward (ShardingEngine::step_during_backward, engine.h): each
// unit's shards go to a thread of the engine's as soon as their gradients are reduced; step()
// keeps the result if the gradients were not changed since, and otherwise restores every shard
// and steps them again.

#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "engine_internal.h"
#include "zeroshard/base/error.h"

namespace zeroshard {

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
