// The per-step lifecycle of sharded units: gather before forward (with prefetch of the next unit
// in the recorded order), reshard after forward, gather again when the first gradient reaches a
// unit's outputs (pre-backward hook), reduce-scatter once every parameter of the unit has its
// gradient (post hooks on the parameters' AccumulateGrad nodes), and a final callback at the end
// of backward that reduces what never fired (unused parameters) and waits for the reductions.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine_internal.h"

#include <torch/csrc/autograd/custom_function.h>
#include "sharded_init_internal.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/host_memory.h"

namespace zeroshard {
namespace detail {

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>>& declared() {
  static std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>> s;
  return s;
}
std::unordered_map<const torch::nn::Module*, UnitState*>& managed() {
  static std::unordered_map<const torch::nn::Module*, UnitState*> m;
  return m;
}

// Runs after a parameter's AccumulateGrad node has put the gradient into .grad.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(UnitState* unit, FlatParam* flat, size_t slot) : unit_(unit), flat_(flat), slot_(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    unit_->engine->on_grad_ready(unit_, flat_, slot_);
    return outputs;
  }

 private:
  UnitState* unit_;
  FlatParam* flat_;
  size_t slot_;
};

}  // namespace

void declare_unit(const torch::nn::Module* module) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    declared()[module] = module->weak_from_this();
  }
  if (t_active_init != nullptr) t_active_init->shard_unit(module);
}

bool is_declared_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = declared().find(module);
  if (it == declared().end()) return false;
  if (it->second.expired()) {  // a destroyed Unit's module; this is another module at its address
    declared().erase(it);
    return false;
  }
  return true;
}

void register_managed_unit(const torch::nn::Module* module, UnitState* unit) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  managed()[module] = unit;
}

void unregister_managed_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  managed().erase(module);
}

UnitState* find_managed_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = managed().find(module);
  return it == managed().end() ? nullptr : it->second;
}

void unit_pre_forward(UnitState* unit) { unit->engine->pre_forward(unit); }

c10::optional<c10::ScalarType> unit_input_dtype(UnitState* unit) {
  const ShardingOptions& o = unit->engine->options;
  if (!o.cast_forward_inputs || o.param_dtype == c10::kFloat) return c10::nullopt;
  return o.param_dtype;
}
void unit_post_forward(UnitState* unit, const std::vector<at::Tensor>& outputs) {
  unit->engine->post_forward(unit, outputs);
}

at::Tensor unit_mark_input(UnitState* unit, const at::Tensor& t) { return unit->engine->mark_input(unit, t); }

// Only units with frozen parameters wait for their inputs (mark_input): the others keep ending
// their backward on their last parameter gradient, whatever their arguments.
void unit_input_opaque(UnitState* unit) {
  if (c10::GradMode::is_enabled() && unit->has_frozen()) unit->inputs_opaque = true;
}

bool unit_in_backward(UnitState* unit) { return unit->engine->in_backward(); }

}  // namespace detail

using detail::UnitState;

bool UnitState::has_frozen() const {
  for (const auto& f : flats) {
    if (!f->trainable()) return true;
  }
  return false;
}

void UnitState::reset_pass() {
  pre_backward_done = post_backward_done = false;
  grads_seen = 0;
  inputs_watched = inputs_seen = 0;
  inputs_opaque = false;
  output_nodes.clear();
  input_nodes.clear();
  outputs_untracked = forward_checkpoints = idle = false;
  grads_due = inputs_due = -1;
}

void detail::ShardingEngineImpl::install_grad_hooks() {
  for (auto& u : units) {
    for (auto& f : u->flats) {
      if (!f->trainable()) continue;
      for (size_t i = 0; i < f->slots().size(); ++i) {
        const ParamSlot& s = f->slots()[i];
        std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(s.param);
        ZS_CHECK(acc != nullptr, "parameter '", s.name, "' has no gradient accumulator (not a leaf?)");
        acc->add_post_hook(std::make_unique<detail::GradReadyHook>(u.get(), f.get(), i));
        u->grad_accumulators.push_back(std::move(acc));
        ++u->grads_expected;
      }
    }
  }
}

bool detail::ShardingEngineImpl::reshard_after_forward() const {
  return options.strategy == ShardingStrategy::kFullShard || options.strategy == ShardingStrategy::kHybridShard;
}

int detail::ShardingEngineImpl::inflight_gathers() const {
  int n = 0;
  for (const auto& u : units) n += u->gathers.empty() ? 0 : 1;
  return n;
}

// Gathers run with the all-gather stream current: the full buffers come from its pool, the
// low-precision cast of the shard runs there, and the collective is ordered after it. That stream
// first waits for compute (see Impl::streams). The compute stream waits for the result in
// wait_gather (the collective's Work, plus the side stream for a one-rank cast).
void detail::ShardingEngineImpl::issue_gather(UnitState* u) {
  if (!u->gathers.empty()) return;  // already in flight
  bool needed = false;
  for (auto& f : u->flats) needed = needed || !f->gathered();
  if (!needed) return;
  streams->wait(streams->all_gather(), streams->current());
  DeviceStreams::Use on_all_gather(*streams, streams->all_gather());
  for (auto& f : u->flats) {
    auto w = f->start_gather(u->name, &counters.all_gather_elements);
    if (w) u->gathers.push_back(std::move(w));
  }
  u->gathered_on_side_stream = streams->enabled();
  read_ahead(u);
}

void detail::ShardingEngineImpl::wait_gather(UnitState* u) {
  issue_gather(u);
  complete_gather(u);
}

void detail::ShardingEngineImpl::complete_gather(UnitState* u) {
  for (auto& w : u->gathers) w->wait();
  u->gathers.clear();
  if (u->gathered_on_side_stream) {
    streams->wait(streams->current(), streams->all_gather());
    u->gathered_on_side_stream = false;
  }
  // Offloaded shards: the gathered buffer holds what the unit needs; the shard goes back to the
  // store (unchanged: nothing is written) until the next gather or step.
  // On a GPU the all-gather stream may still read a shard: it is kept until that stream is past
  // this point.
  if (param_store != nullptr) {
    std::vector<at::Tensor> dropped;
    for (auto& f : u->flats) f->release_shard(&dropped);
    released_shards.poll();
    if (!dropped.empty()) released_shards.release_after(std::move(dropped), streams->mark(streams->all_gather()));
  }
}

void detail::ShardingEngineImpl::prefetch(int forward_index) {
  if (in_backward()) forward_index = backward_next(forward_index);
  if (recording_order || forward_index < 0 || forward_index >= static_cast<int>(forward_order.size())) return;
  UnitState* next = forward_order[forward_index];
  bool gathered = true;
  for (auto& f : next->flats) gathered = gathered && f->gathered();
  if (gathered || !next->gathers.empty() || inflight_gathers() >= options.limit_all_gathers) return;
  issue_gather(next);
}

void detail::ShardingEngineImpl::reshard(UnitState* u) {
  complete_gather(u);  // never free a buffer a collective still writes
  for (auto& f : u->flats) f->free_full();
}

void detail::ShardingEngineImpl::pre_forward(UnitState* u) {
  // During a backward through this engine a unit's forward is the recomputation of an activation
  // checkpoint (the reentrant checkpoint re-runs it inside backward).
  ZS_REQUIRE(root_active || u->is_root || in_backward(), UsageError, "unit '", u->name,
             "' was called outside the engine's forward: run the model inside engine.forward([&] { ... })");
  set_memory_phase(in_backward() ? u->phase_recompute : u->phase_forward);
  if (!in_backward()) forward_sequence.push_back(u->ordinal);
  if (recording_order && u->forward_index < 0) {
    u->forward_index = static_cast<int>(forward_order.size());
    forward_order.push_back(u);
  }
  u->checkpoints_before_forward = checkpoint_forwards_on_this_thread();
  issue_gather(u);
  // During a recomputation the next unit in forward order has already finished its backward. A
  // unit missing from the recorded order (re-recorded from the last forward) prefetches nothing.
  if (options.forward_prefetch && !in_backward() && u->forward_index >= 0) prefetch(u->forward_index + 1);
  wait_gather(u);
}

void detail::ShardingEngineImpl::post_forward(UnitState* u, const std::vector<at::Tensor>& outputs) {
  // A recomputation is followed at once by the unit's own backward: stay gathered until then.
  const bool recomputing = in_backward() && c10::GradMode::is_enabled();
  if (checkpoint_forwards_on_this_thread() != u->checkpoints_before_forward) u->forward_checkpoints = true;
  if (reshard_after_forward() && !u->is_root && !recomputing) reshard(u);
  if (!u->is_root) set_memory_phase(in_backward() ? root->phase_backward : root->phase_forward);
  if (!c10::GradMode::is_enabled()) return;
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    at::Tensor out = t;  // register_hook is non-const
    out.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
    if (out.grad_fn() == nullptr) {
      u->outputs_untracked = true;
    } else {
      remember_node(&u->output_nodes, out.grad_fn());
    }
  }
}

// A unit with frozen parameters cannot take its last parameter gradient as the end of its
// backward: a frozen weight is still read by the node that computes the gradient of the unit's
// input (a LoRA base layer; the adapters' gradients may all be in before it runs), and a unit
// without trainable parameters has no gradient accumulator at all. Its inputs tell: each tensor
// argument that needs a gradient goes through an identity node (InputDone) whose backward runs
// once the unit's backward has produced that input's gradient, before the gradient travels on to
// whatever made the input (the previous unit, whose pre-backward gathers and prefetches). Once
// all of them and the parameters' gradients are in, nothing of the unit's backward is left: it
// reshards there (FSDP does the same for frozen modules) instead of holding its parameters until
// the end of backward. Inputs that need no gradient are not waited for (no backward reaches the
// unit through them); arguments that may hide tensors leave the unit to the end of backward.
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct InputDone : torch::autograd::Function<InputDone> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, detail::ShardingEngineImpl* engine,
                            UnitState* unit, int64_t pass) {
    ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    ctx->saved_data["pass"] = pass;
    return x;  // returned as a view with this node as its gradient function
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* engine = reinterpret_cast<detail::ShardingEngineImpl*>(ctx->saved_data["engine"].toInt());
    auto* unit = reinterpret_cast<UnitState*>(ctx->saved_data["unit"].toInt());
    engine->input_grad_ready(unit, static_cast<uint64_t>(ctx->saved_data["pass"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor detail::ShardingEngineImpl::mark_input(UnitState* u, const at::Tensor& x) {
  if (u->is_root || options.strategy == ShardingStrategy::kNoShard || !c10::GradMode::is_enabled() ||
      !x.defined() || !x.requires_grad()) {
    return x;
  }
  if (!u->has_frozen()) return x;  // its last parameter gradient ends its backward
  ++u->inputs_watched;
  at::Tensor watched = InputDone::apply(x, this, u, static_cast<int64_t>(backward_passes));
  remember_node(&u->input_nodes, watched.grad_fn());
  return watched;
}

void detail::ShardingEngineImpl::input_grad_ready(UnitState* u, uint64_t pass) {
  if (pass != backward_passes || !u->pre_backward_done || u->post_backward_done) return;
  ++u->inputs_seen;
  maybe_post_backward(u);
}

void detail::ShardingEngineImpl::maybe_post_backward(UnitState* u) {
  const int grads_due = u->grads_due < 0 ? u->grads_expected : u->grads_due;
  const int inputs_due = u->inputs_due < 0 ? u->inputs_watched : u->inputs_due;
  if (u->grads_seen >= grads_due && !u->inputs_opaque && u->inputs_seen >= inputs_due) post_backward(u);
}

void detail::ShardingEngineImpl::pre_backward(UnitState* u) {
  if (u->pre_backward_done) return;
  u->pre_backward_done = true;
  const bool first = !callback_queued;
  if (first) {
    outer_backward_phase = current_memory_phase();
    callback_queued = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
    // Before the backward's first collective: every rank ran the same units (unit_order.cpp).
    check_unit_order_at_backward();
  }
  read_backward_graph(u, first);
  set_memory_phase(u->phase_backward);
  issue_gather(u);
  if (options.backward_prefetch == BackwardPrefetch::kBackwardPre) prefetch(u->forward_index - 1);
  wait_gather(u);
  for (auto& f : u->flats) f->prepare_grads();
  // No parameter gradient and no watched input is due: nothing of its backward will run.
  if (u->grads_due == 0 && u->inputs_due == 0) maybe_post_backward(u);
}

void detail::ShardingEngineImpl::on_grad_ready(UnitState* u, FlatParam* f, size_t slot) {
  ZS_REQUIRE(u->pre_backward_done, UsageError, "unit '", u->name,
             "' produced parameter gradients but none of its outputs was seen by the engine: a unit's "
             "forward must return its tensors (a tensor, a vector or a tuple of tensors) and be called "
             "through its Unit holder");
  f->take_grad(slot);
  ++u->grads_seen;
  maybe_post_backward(u);
}

// Gradient buffers retired to the reduce-scatter stream that may be outstanding before the compute
// stream waits for the oldest (bounds their memory when the host runs ahead of the GPU).
constexpr size_t kMaxRetiredGradBuffers = 2;

// Reductions run with the reduce-scatter stream current, after it waited for the gradients on the
// compute stream: the cast to reduce_dtype, the collectives' ordering, their outputs and the
// addition into the fp32 gradient shard all live there. The training thread waits for one
// reduce-scatter at a time (the previous unit's, when the next unit's gradients are ready, so
// its gradient buffer is freed), and never for a replica all-reduce (HYBRID_SHARD, NO_SHARD):
// those overlap the rest of backward and are waited for once, in finalize_backward.
void detail::ShardingEngineImpl::post_backward(UnitState* u) {
  if (u->post_backward_done) return;
  u->post_backward_done = true;
  if (no_sync_depth == 0) {
    const c10::Stream compute = streams->current();
    streams->wait(streams->reduce_scatter(), compute);
    DeviceStreams::Use on_reduce_scatter(*streams, streams->reduce_scatter());
    for (auto& f : u->flats) f->start_reduce(u->name, &counters.reduce_elements);
    for (UnitState* p : reducing) advance_reduce(p, compute);
    reducing.assign(1, u);
  }
  if (options.strategy != ShardingStrategy::kNoShard) reshard(u);
  if (options.backward_prefetch == BackwardPrefetch::kBackwardPost) prefetch(u->forward_index - 1);
  set_memory_phase(root->phase_backward);
}

void detail::ShardingEngineImpl::retire(std::vector<at::Tensor> buffers, const c10::Stream& compute) {
  if (!buffers.empty()) retired_grads.release_after(std::move(buffers), streams->mark(streams->reduce_scatter()));
  if (retired_grads.poll() > kMaxRetiredGradBuffers) retired_grads.release_after_wait(compute, kMaxRetiredGradBuffers);
}

void detail::ShardingEngineImpl::advance_reduce(UnitState* u, const c10::Stream& compute) {
  std::vector<at::Tensor> retired;
  bool replica_pending = false;
  for (auto& f : u->flats) {
    replica_pending = f->advance_reduce(u->name, &counters.reduce_elements, &retired) || replica_pending;
  }
  retire(std::move(retired), compute);
  if (replica_pending) {
    replica_reducing.push_back(u);
  } else {
    finish_reduce(u, compute);
  }
}

void detail::ShardingEngineImpl::finish_reduce(UnitState* u, const c10::Stream& compute) {
  std::vector<at::Tensor> retired;
  for (auto& f : u->flats) f->finish_reduce(u->name, &counters.reduce_elements, &retired);
  retire(std::move(retired), compute);
}

void detail::ShardingEngineImpl::finalize_backward() {
  // Units whose parameters did not all receive gradients (unused this step) are reduced now, with
  // zeros for the missing ones, so every rank issues the same collectives.
  for (auto& u : units) {
    if (u->pre_backward_done && !u->post_backward_done) post_backward(u.get());
  }
  // Replicas that ran different units paired their all-reduces wrongly: say so before their
  // results become gradients.
  finish_replica_order_check();
  const c10::Stream compute = streams->current();
  if (no_sync_depth == 0) {
    streams->wait(streams->reduce_scatter(), compute);
    {
      DeviceStreams::Use on_reduce_scatter(*streams, streams->reduce_scatter());
      for (auto& u : units) finish_reduce(u.get(), compute);
    }
    // The optimizer, clipping and the next step read the gradient shards on the compute stream.
    streams->wait(compute, streams->reduce_scatter());
  }
  // Offloaded gradients were written behind the backward: a failed write fails it (the values
  // stay in memory until reset_after_error() drops this step's gradients).
  if (grad_store != nullptr) grad_store->flush();
  retired_grads.release_after_wait(compute);
  for (auto& u : units) {
    if (options.strategy != ShardingStrategy::kNoShard) reshard(u.get());
    u->reset_pass();
  }
  ++backward_passes;
  reducing.clear();
  replica_reducing.clear();
  callback_queued = false;
  recording_order = false;
  set_memory_phase(outer_backward_phase);
}

}  // namespace zeroshard

namespace zeroshard {

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
  }
  impl_->forward_sequence.clear();
  impl_->sequence_checked = false;
  impl_->root_active = true;
  impl_->outer_forward_phase = current_memory_phase();
  if (impl_->options.autocast) {
    impl_->autocast = std::make_unique<AutocastGuard>(impl_->comm->backend() == std::string("nccl")
                                                          ? c10::DeviceType::CUDA
                                                          : c10::DeviceType::CPU,
                                                      impl_->options.autocast_dtype);
  }
  impl_->sync_buffers_before_forward();
  impl_->pre_forward(impl_->root);
}

void ShardingEngine::abort_root() noexcept {
  // The memory phase stays where the forward failed, for an out-of-memory report, until the next
  // forward or reset_after_error restores the caller's. A forward produces no gradients: those
  // accumulated before it (no_sync micro-batches, earlier backward passes) stay.
  impl_->root_active = false;
  impl_->autocast.reset();
  impl_->forward_failed = true;
  try {
    for (auto& u : impl_->units) impl_->reshard(u.get());
  } catch (...) {
  }
}

void ShardingEngine::reset_after_error() {
  ZS_REQUIRE(!impl_->root_active, UsageError, "reset_after_error() called inside engine.forward()");
  impl_->reset_after_error(/*drop_grads=*/true);
}

void detail::ShardingEngineImpl::reset_after_error(bool drop_grads) noexcept {
  // Each step below waits for collectives this rank issued before the failure; ranks that failed
  // at the same point issued the same ones, so every wait completes.
  const c10::Stream compute = streams->current();
  if (replica_order_check.work) {  // issued by every replica at the same point
    try {
      replica_order_check.work->wait();
    } catch (...) {
    }
    replica_order_check = OrderExchange{};
  }
  for (auto& u : units) {
    try {
      complete_gather(u.get());
    } catch (...) {  // a failed gather: its communicator reports it at the next use
      u->gathers.clear();
      u->gathered_on_side_stream = false;
    }
  }
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

void detail::ShardingEngineImpl::require_finished_backward(const char* what) const {
  ZS_REQUIRE(!in_backward(), UsageError, what, ": the last backward did not finish (it threw), so the gradients "
             "are partial; skip this step: the next engine.forward() (or engine.reset_after_error()) drops them "
             "and makes the engine usable again");
}

void ShardingEngine::end_root(const std::vector<at::Tensor>& outputs) {
  impl_->root_active = false;
  impl_->autocast.reset();
  impl_->post_forward(impl_->root, outputs);
  set_memory_phase(impl_->outer_forward_phase);
  // No backward follows a forward without grad: its unit sequence is checked now.
  if (!c10::GradMode::is_enabled()) impl_->check_unit_order_without_grad();
}

}  // namespace zeroshard
