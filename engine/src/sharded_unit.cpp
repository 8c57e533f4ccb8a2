// SPDX-License-Identifier: Apache-2.0
// A unit's lifecycle in a step (FULL_SHARD): gather before forward (prefetching the next unit in
// the schedule's order), reshard after forward, gather again when the first gradient reaches the
// unit's outputs (pre-backward hook), reduce-scatter once every parameter of the unit has its
// gradient (post hooks on the parameters' AccumulateGrad nodes) and, for units with frozen
// parameters, once the gradients of their inputs are done too.
#include "sharded_unit.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "unit_schedule.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/engine/activation_checkpoint.h"

namespace zeroshard::detail {

namespace {

// Runs after a parameter's AccumulateGrad node has put the gradient into .grad.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(ShardedUnit* unit, FlatParam* flat, size_t slot) : unit_(unit), flat_(flat), slot_(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    unit_->on_grad_ready(flat_, slot_);
    return outputs;
  }

 private:
  ShardedUnit* unit_;
  FlatParam* flat_;
  size_t slot_;
};

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
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What InputDone's backward needs, kept in the autograd context as a capsule.
struct InputWatch : torch::CustomClassHolder {
  InputWatch(ShardedUnit* u, uint64_t p) : unit(u), pass(p) {}
  ShardedUnit* unit;
  uint64_t pass;  // the engine's backward pass count at the forward: a stale node is ignored
};

constexpr const char* kWatchKey = "zeroshard.input_watch";

struct InputDone : torch::autograd::Function<InputDone> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<InputWatch> watch) {
    ctx->saved_data[kWatchKey] = at::IValue::make_capsule(std::move(watch));
    return x;  // returned as a view with this node as its gradient function
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::intrusive_ptr<torch::CustomClassHolder> holder = ctx->saved_data.at(kWatchKey).toCapsule();
    const auto* watch = static_cast<const InputWatch*>(holder.get());
    watch->unit->input_grad_ready(watch->pass);
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

ShardedUnit::ShardedUnit(UnitHost& host, std::string unit_name, int unit_ordinal,
                         torch::nn::Module* unit_module, bool root)
    : name(std::move(unit_name)), ordinal(unit_ordinal), module(unit_module), is_root(root), host_(host) {
  const std::string what = is_root ? std::string("outside units (root module)") : "unit '" + name + "'";
  phase_forward_ = memory_phase_id("forward: " + what);
  phase_backward_ = memory_phase_id("backward: " + what);
  phase_recompute_ = memory_phase_id("backward: recompute of " + what);
}

bool ShardedUnit::has_frozen() const {
  for (const auto& f : flats) {
    if (!f->trainable()) return true;
  }
  return false;
}

bool ShardedUnit::in_backward() const { return host_.in_backward(); }

c10::optional<c10::ScalarType> ShardedUnit::input_dtype() const {
  const ShardingOptions& o = host_.options();
  if (!o.cast_forward_inputs || o.param_dtype == c10::kFloat) return c10::nullopt;
  return o.param_dtype;
}

void ShardedUnit::install_grad_hooks() {
  for (auto& f : flats) {
    if (!f->trainable()) continue;
    for (size_t i = 0; i < f->slots().size(); ++i) {
      const ParamSlot& s = f->slots()[i];
      std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(s.param);
      ZS_CHECK(acc != nullptr, "parameter '", s.name, "' has no gradient accumulator (not a leaf?)");
      acc->add_post_hook(std::make_unique<GradReadyHook>(this, f.get(), i));
      grad_accumulators_.push_back(std::move(acc));
      ++grads_expected_;
    }
  }
}

// ---- unshard / reshard ------------------------------------------------------------------------

bool ShardedUnit::unsharded() const {
  for (const auto& f : flats) {
    if (!f->gathered()) return false;
  }
  return true;
}

// Gathers run with the all-gather stream current: the full buffers come from its pool, the
// low-precision cast of the shard runs there, and the collective is ordered after it. That stream
// first waits for compute (see ShardingEngineImpl::streams). The compute stream waits for the
// result in complete_unshard (the collective's Work, plus the side stream for a one-rank cast).
void ShardedUnit::unshard() {
  if (gather_in_flight() || unsharded()) return;
  DeviceStreams& st = host_.streams();
  st.wait(st.all_gather(), st.current());
  DeviceStreams::Use on_all_gather(st, st.all_gather());
  host_.gathers_starting(*this);
  for (auto& f : flats) {
    auto w = f->start_gather(name, &host_.counters().all_gather_elements, &host_.counters().all_gather_bytes);
    if (w) gathers_.push_back(std::move(w));
  }
  gathered_on_side_stream_ = st.enabled();
  host_.gathers_started(*this);
}

void ShardedUnit::wait_for_unshard() {
  unshard();
  complete_unshard();
}

void ShardedUnit::complete_unshard() {
  for (auto& w : gathers_) w->wait();
  gathers_.clear();
  DeviceStreams& st = host_.streams();
  if (gathered_on_side_stream_) {
    st.wait(st.current(), st.all_gather());
    gathered_on_side_stream_ = false;
  }
  // The gathered buffer holds what the unit needs: offloaded shards go back to their store
  // (OffloadStores::release_gathered).
  host_.gathers_complete(*this);
}

void ShardedUnit::reshard() {
  complete_unshard();  // never free a buffer a collective still writes
  for (auto& f : flats) f->free_full();
}

void ShardedUnit::abandon_gathers() noexcept {
  try {
    complete_unshard();
  } catch (...) {  // a failed gather: its communicator reports it at the next use
    gathers_.clear();
    gathered_on_side_stream_ = false;
  }
}

// ---- forward ----------------------------------------------------------------------------------

void ShardedUnit::pre_forward() {
  // During a backward through this engine a unit's forward is the recomputation of an activation
  // checkpoint (the reentrant checkpoint re-runs it inside backward).
  const bool backward = host_.in_backward();
  ZS_REQUIRE(host_.forward_running() || is_root || backward, UsageError, "unit '", name,
             "' was called outside the engine's forward: run the model inside engine.forward([&] { ... })");
  set_memory_phase(backward ? phase_recompute_ : phase_forward_);
  if (!backward) host_.forward_started(*this);
  host_.schedule().record(this);
  pass.checkpoints_before_forward = checkpoint_forwards_on_this_thread();
  unshard();
  // During a recomputation the next unit in forward order has already finished its backward. A
  // unit missing from the recorded order (re-recorded from the last forward) prefetches nothing.
  if (host_.options().forward_prefetch && !backward && forward_index >= 0) {
    host_.schedule().prefetch(forward_index + 1, /*backward=*/false);
  }
  wait_for_unshard();
}

void ShardedUnit::post_forward(const std::vector<at::Tensor>& outputs) {
  const bool backward = host_.in_backward();
  // A recomputation is followed at once by the unit's own backward: stay gathered until then.
  const bool recomputing = backward && c10::GradMode::is_enabled();
  if (checkpoint_forwards_on_this_thread() != pass.checkpoints_before_forward) pass.forward_checkpoints = true;
  if (host_.reshard_after_forward() && !is_root && !recomputing) {
    // hpZ: a forward that backward will follow keeps each flat parameter's slice for it (a
    // checkpointed run records no gradient, but its recomputation in backward gathers again).
    if (!backward && (c10::GradMode::is_enabled() || in_checkpoint_forward())) {
      complete_unshard();
      for (auto& f : flats) f->keep_secondary();
    }
    reshard();
  }
  if (!is_root) set_memory_phase(backward ? host_.root().phase_backward() : host_.root().phase_forward());
  if (!c10::GradMode::is_enabled()) return;
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    at::Tensor out = t;  // register_hook is non-const
    out.register_hook([this](const at::Tensor&) { pre_backward(); });
    if (out.grad_fn() == nullptr) {
      pass.outputs_untracked = true;
    } else {
      remember_node(&pass.output_nodes, out.grad_fn());
    }
  }
}

at::Tensor ShardedUnit::mark_input(const at::Tensor& x) {
  if (is_root || host_.options().strategy == ShardingStrategy::kNoShard || !c10::GradMode::is_enabled() ||
      !x.defined() || !x.requires_grad()) {
    return x;
  }
  if (!has_frozen()) return x;  // its last parameter gradient ends its backward
  ++pass.inputs_watched;
  at::Tensor watched = InputDone::apply(x, c10::make_intrusive<InputWatch>(this, host_.backward_passes()));
  remember_node(&pass.input_nodes, watched.grad_fn());
  return watched;
}

// Only units with frozen parameters wait for their inputs (mark_input): the others keep ending
// their backward on their last parameter gradient, whatever their arguments.
void ShardedUnit::mark_input_opaque() {
  if (c10::GradMode::is_enabled() && has_frozen()) pass.inputs_opaque = true;
}

// ---- backward ---------------------------------------------------------------------------------

void ShardedUnit::pre_backward() {
  if (pass.pre_backward_done) return;
  pass.pre_backward_done = true;
  const auto* graph = backward_graph_nodes();
  if (!host_.in_backward()) host_.backward_started(*this, graph);
  if (graph != nullptr) read_backward_graph(*graph);
  set_memory_phase(phase_backward_);
  unshard();
  if (host_.options().backward_prefetch == BackwardPrefetch::kBackwardPre) {
    host_.schedule().prefetch(forward_index - 1, /*backward=*/true);
  }
  wait_for_unshard();
  for (auto& f : flats) f->prepare_grads();
  // No parameter gradient and no watched input is due: nothing of its backward will run.
  if (pass.grads_due == 0 && pass.inputs_due == 0) maybe_post_backward();
}

void ShardedUnit::on_grad_ready(FlatParam* flat, size_t slot) {
  ZS_REQUIRE(pass.pre_backward_done, UsageError, "unit '", name,
             "' produced parameter gradients but none of its outputs was seen by the engine: a unit's "
             "forward must return its tensors (a tensor, a vector or a tuple of tensors) and be called "
             "through its Unit holder");
  flat->take_grad(slot);
  ++pass.grads_seen;
  maybe_post_backward();
}

void ShardedUnit::input_grad_ready(uint64_t pass_number) {
  if (pass_number != host_.backward_passes() || !pass.pre_backward_done || pass.post_backward_done) return;
  ++pass.inputs_seen;
  maybe_post_backward();
}

// post_backward once the parameters' gradients and the watched inputs' are all complete. The root
// has no inputs to watch (the model's own come before it) and its frozen parameters may be read by
// a backward that runs after its last gradient arrived (a frozen final norm before a trainable
// head): a root with frozen parameters stays gathered until the backward ends (finalize_backward).
void ShardedUnit::maybe_post_backward() {
  if (is_root && has_frozen()) return;
  const int grads_due = pass.grads_due < 0 ? grads_expected_ : pass.grads_due;
  const int inputs_due = pass.inputs_due < 0 ? pass.inputs_watched : pass.inputs_due;
  if (pass.grads_seen >= grads_due && !pass.inputs_opaque && pass.inputs_seen >= inputs_due) post_backward();
}

// Reductions run with the reduce-scatter stream current, after it waited for the gradients on the
// compute stream: the cast to reduce_dtype, the collectives' ordering, their outputs and the
// addition into the fp32 gradient shard all live there. The training thread waits for one
// reduce-scatter at a time (the previous unit's, when the next unit's gradients are ready, so
// its gradient buffer is freed), and never for a replica all-reduce (HYBRID_SHARD, NO_SHARD):
// those overlap the rest of backward and are waited for once, in finalize_backward.
void ShardedUnit::post_backward() {
  if (pass.post_backward_done) return;
  pass.post_backward_done = true;
  if (host_.reduces_gradients()) {
    DeviceStreams& st = host_.streams();
    const c10::Stream compute = st.current();
    st.wait(st.reduce_scatter(), compute);
    DeviceStreams::Use on_reduce_scatter(st, st.reduce_scatter());
    reduce_start();
    host_.reduction_started(*this, compute);
  }
  if (host_.options().strategy != ShardingStrategy::kNoShard) reshard();
  for (auto& f : flats) f->drop_secondary();  // hpZ: the unit's backward is done
  if (host_.options().backward_prefetch == BackwardPrefetch::kBackwardPost) {
    host_.schedule().prefetch(forward_index - 1, /*backward=*/true);
  }
  set_memory_phase(host_.root().phase_backward());
}

// ---- gradient reduction -----------------------------------------------------------------------

void ShardedUnit::reduce_start() {
  CommCounters& c = host_.counters();
  for (auto& f : flats) f->start_reduce(name, &c.reduce_elements, &c.reduce_bytes);
}

void ShardedUnit::reduce_advance(const c10::Stream& compute) {
  std::vector<at::Tensor> retired;
  bool replica_pending = false;
  for (auto& f : flats) {
    CommCounters& c = host_.counters();
    replica_pending = f->advance_reduce(name, &c.reduce_elements, &c.reduce_bytes, &retired) || replica_pending;
  }
  host_.retire(std::move(retired), compute);
  if (replica_pending) {
    host_.replica_reduction_pending(*this);
  } else {
    reduce_finish(compute);
  }
}

void ShardedUnit::reduce_finish(const c10::Stream& compute) {
  std::vector<at::Tensor> retired;
  CommCounters& c = host_.counters();
  for (auto& f : flats) f->finish_reduce(name, &c.reduce_elements, &c.reduce_bytes, &retired);
  host_.retire(std::move(retired), compute);
  host_.gradients_reduced(*this);
}

}  // namespace zeroshard::detail
