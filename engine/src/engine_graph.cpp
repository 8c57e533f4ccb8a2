// SPDX-License-Identifier: Apache-2.0
// What a backward runs: the engine reads LibTorch's graph task when the backward reaches a unit
// (see the comment below), and the forward records the nodes it will look for there.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <unordered_set>

#include "sharded_unit.h"

namespace zeroshard::detail {

// Keeps a weak reference to a gradient function recorded by a forward (the graph may be dropped
// without a backward: forget the expired ones once there are many).
void remember_node(std::vector<std::weak_ptr<torch::autograd::Node>>* nodes,
                   const std::shared_ptr<torch::autograd::Node>& node) {
  if (nodes->size() >= 64) {
    nodes->erase(std::remove_if(nodes->begin(), nodes->end(), [](const auto& n) { return n.expired(); }),
                 nodes->end());
  }
  nodes->push_back(node);
}

// What a backward runs. LibTorch's backward first collects every node reachable from its root
// and then runs each of them once (get_current_graph_task_nodes_in_graph; the root itself, the
// loss's gradient function, is not in the set). So when the backward reaches a unit, its graph
// tells which of the unit's parameter gradients (AccumulateGrad nodes) and watched inputs will
// come: the unit's backward ends when those are in, and a unit whose trainable parameters get no
// gradient this pass (unused, or only behind outputs the loss does not depend on) reshards then
// instead of at the end of backward. And at the loss (the root unit's first hook), a unit none of
// whose outputs is in the graph will not run backward at all: it is resharded (SHARD_GRAD_OP kept
// it) and skipped by prefetch. The graph cannot tell, and the unit keeps waiting for everything
// (the end of backward at worst), when: the backward runs a selection of its graph
// (torch::autograd::grad, backward with inputs); a checkpoint ran inside the unit's forward (its
// recomputation is a nested backward with a graph of its own); the unit is the root.
const std::unordered_set<torch::autograd::Node*>* backward_graph_nodes() {
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  if (exec_info == nullptr || !exec_info->empty()) return nullptr;
  return torch::autograd::get_current_graph_task_nodes_in_graph();
}

bool in_graph(const std::unordered_set<torch::autograd::Node*>& graph, const std::shared_ptr<torch::autograd::Node>& n) {
  return n != nullptr && graph.count(n.get()) > 0;
}

bool ShardedUnit::unreached_by(const std::unordered_set<torch::autograd::Node*>& graph, const ShardedUnit& root) const {
  if (is_root || pass.output_nodes.empty() || pass.outputs_untracked) return false;
  for (const auto& weak : pass.output_nodes) {
    const std::shared_ptr<torch::autograd::Node> n = weak.lock();
    if (n == nullptr) continue;
    for (const auto& r : root.pass.output_nodes) {
      if (r.lock() == n) return false;  // the graph's root (the loss): an output of the root unit too
    }
    if (in_graph(graph, n)) return false;
  }
  return true;
}

void ShardedUnit::read_backward_graph(const std::unordered_set<torch::autograd::Node*>& graph) {
  if (is_root || pass.forward_checkpoints) return;
  pass.grads_due = 0;
  for (const auto& acc : grad_accumulators_) pass.grads_due += in_graph(graph, acc) ? 1 : 0;
  pass.inputs_due = 0;
  for (const auto& weak : pass.input_nodes) pass.inputs_due += in_graph(graph, weak.lock()) ? 1 : 0;
}

}  // namespace zeroshard::detail
