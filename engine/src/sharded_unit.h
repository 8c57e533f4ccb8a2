// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardedUnit: one unit of the engine (a module wrapped as zeroshard::Unit or picked by the
// auto-wrap policy, or the root) with its flat parameters and what one forward/backward pass
// records about it (the shape of FSDP2's FSDPParamGroup). It knows its own lifecycle:
//   unshard / wait_for_unshard / reshard      gathers of its flat parameters on the all-gather
//                                              stream, compute waiting for them, freeing them
//   pre_forward / post_forward / mark_input   around its forward (hooks on its outputs for backward)
//   pre_backward / on_grad_ready / post_backward
//                                              gathered again for backward, its gradients taken from
//                                              autograd and reduced (reduce_start / reduce_advance /
//                                              reduce_finish on the reduce-scatter stream)
// The engine owns the units and the state they share (streams, counters, stores, the schedule that
// orders prefetching); a unit reaches it only through UnitHost (unit_host.h). Not thread-safe: the training thread
// (autograd's hooks run on it for CPU tensors, and on the device's thread with the GIL-free C++
// engine they are serialised by the backward itself).

#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "flat_param.h"
#include "unit_host.h"
#include "zeroshard/comm/streams.h"

namespace zeroshard::detail {

// The nodes the running backward will run (null when the graph cannot tell: a backward over a
// selection of its graph, or no backward running): engine_graph.cpp.
const std::unordered_set<torch::autograd::Node*>* backward_graph_nodes();
bool in_graph(const std::unordered_set<torch::autograd::Node*>& graph, const std::shared_ptr<torch::autograd::Node>& n);
// Keeps a weak reference to a gradient function recorded by a forward.
void remember_node(std::vector<std::weak_ptr<torch::autograd::Node>>* nodes,
                   const std::shared_ptr<torch::autograd::Node>& node);

// What the current forward/backward pass recorded about a unit; reset at the end of every backward.
struct UnitPass {
  bool pre_backward_done = false;
  bool post_backward_done = false;
  int grads_seen = 0;
  // Units with frozen parameters end their backward when, besides their parameters' gradients,
  // the gradients of the inputs they were called with are complete (mark_input). `inputs_opaque`:
  // a call had arguments that may hide tensors (then: at the end of backward).
  int inputs_watched = 0;
  int inputs_seen = 0;
  bool inputs_opaque = false;
  // What this pass's backward will run, read from its autograd graph (engine_graph.cpp). Recorded by
  // the forward: the gradient functions of the outputs hooked and of the inputs watched;
  // `outputs_untracked`: an output needing a gradient had none (a leaf); `forward_checkpoints`:
  // checkpointed runs started inside the unit's forward. Decided when the backward reaches the
  // unit: the parameter gradients and watched inputs due (-1: all of them, when the graph cannot
  // tell); `idle`: no output of the unit is in the backward's graph.
  std::vector<std::weak_ptr<torch::autograd::Node>> output_nodes, input_nodes;
  bool outputs_untracked = false;
  uint64_t checkpoints_before_forward = 0;
  bool forward_checkpoints = false;
  int grads_due = -1;
  int inputs_due = -1;
  bool idle = false;
};

class ShardedUnit {
 public:
  ShardedUnit(UnitHost& host, std::string name, int ordinal, torch::nn::Module* module, bool is_root);

  const std::string name;  // module path in the model; "<root>" for the model itself
  const int ordinal;       // index in the engine's units
  torch::nn::Module* const module;
  const bool is_root;
  bool adopted = false;  // its flat parameters were built (and sharded) by a ShardedInit
  std::vector<std::unique_ptr<FlatParam>> flats;  // trainable first, then frozen, then encoded
  int forward_index = -1;  // position in the schedule's order; -1 when not in it
  UnitPass pass;

  bool has_frozen() const;
  // A backward through its engine is running (a forward now is an activation checkpoint's recomputation).
  bool in_backward() const;
  // The dtype its floating inputs are cast to, or nullopt (no mixed precision, or no casting).
  c10::optional<c10::ScalarType> input_dtype() const;
  // Hooks its trainable parameters' gradient accumulators (after the flat parameters exist).
  void install_grad_hooks();

  // --- unshard / reshard ---
  bool unsharded() const;  // every flat parameter gathered
  bool gather_in_flight() const { return !gathers_.empty(); }
  // Starts the gathers that are needed, on the all-gather stream, then reads the next unit's
  // offloaded shards ahead. No-op when in flight or gathered.
  void unshard();
  // unshard(), then the compute stream waits for the gathers; offloaded shards go back to the store.
  void wait_for_unshard();
  // Makes the compute stream wait for the gathers in flight, if any; offloaded shards go back to
  // their store (the gathered buffer holds what the unit needs).
  void complete_unshard();
  // Frees the gathered buffers (after waiting for gathers in flight).
  void reshard();

  // --- forward ---
  void pre_forward();
  void post_forward(const std::vector<at::Tensor>& outputs);
  // A tensor argument as the unit's forward should see it (see InputDone in sharded_unit.cpp).
  at::Tensor mark_input(const at::Tensor& x);
  void mark_input_opaque();

  // --- backward ---
  void pre_backward();
  void on_grad_ready(FlatParam* flat, size_t slot);
  void input_grad_ready(uint64_t pass_number);
  void post_backward();
  // The parameter gradients and watched inputs due this pass, from the running backward's graph
  // (engine_graph.cpp); left unknown (all of them) for the root and units with checkpoints inside.
  void read_backward_graph(const std::unordered_set<torch::autograd::Node*>& graph);
  // At the loss (the root's first hook), with the running backward's graph: true when none of the
  // unit's outputs is in it (nor the loss itself), so the unit will not run backward this pass
  // (engine_graph.cpp). Always false for the root and units whose outputs were not all recorded.
  bool unreached_by(const std::unordered_set<torch::autograd::Node*>& graph, const ShardedUnit& root) const;

  // --- gradient reduction stages (the reduce-scatter stream current; `compute` made the gradients)
  void reduce_start();
  // Past the reduce-scatter: finished at once, or left to the engine while a replica all-reduce
  // is in flight (finished by reduce_finish at the end of backward).
  void reduce_advance(const c10::Stream& compute);
  void reduce_finish(const c10::Stream& compute);

  // After a failed pass: waits for the gathers this rank issued (a failed one is reported by its
  // communicator at the next use). Never throws.
  void abandon_gathers() noexcept;
  void reset_pass() { pass = UnitPass{}; }
  int phase_forward() const { return phase_forward_; }
  int phase_backward() const { return phase_backward_; }

 private:
  void maybe_post_backward();

  UnitHost& host_;
  std::vector<std::shared_ptr<Work>> gathers_;  // in flight
  bool gathered_on_side_stream_ = false;  // a gather ran on the all-gather stream; compute has not waited
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // kept alive for their hooks
  int grads_expected_ = 0;
  // Memory phases (zeroshard/core/host_memory.h) its allocations are recorded under.
  int phase_forward_ = 0, phase_backward_ = 0, phase_recompute_ = 0;
};

}  // namespace zeroshard::detail
