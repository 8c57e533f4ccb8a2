// What a backward runs: the engine reads LibTorch's graph task when the backward reaches a unit
// (see the comment below), and the forward records the nodes it will look for there.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <unordered_set>

#include "engine_internal.h"

namespace zeroshard {

// Keeps a weak reference to a gradient function recorded by a forward (the graph may be dropped
// without a backward: forget the expired ones once there are many).
void detail::remember_node(std::vector<std::weak_ptr<torch::autograd::Node>>* nodes,
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
namespace {

const std::unordered_set<torch::autograd::Node*>* nodes_to_run() {
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  if (exec_info == nullptr || !exec_info->empty()) return nullptr;
  return torch::autograd::get_current_graph_task_nodes_in_graph();
}

bool in_graph(const std::unordered_set<torch::autograd::Node*>& graph, const std::shared_ptr<torch::autograd::Node>& node) {
  return node != nullptr && graph.count(node.get()) > 0;
}

}  // namespace

void detail::ShardingEngineImpl::read_backward_graph(UnitState* u, bool first) {
  const std::unordered_set<torch::autograd::Node*>* graph = nodes_to_run();
  if (graph == nullptr) return;
  if (first && u->is_root) {
    for (auto& v : units) {
      if (v->is_root || v->output_nodes.empty() || v->outputs_untracked) continue;
      bool reached = false;
      for (const auto& weak : v->output_nodes) {
        const std::shared_ptr<torch::autograd::Node> n = weak.lock();
        if (n == nullptr) continue;
        bool is_loss = false;  // the graph's root: an output of the root unit too
        for (const auto& r : u->output_nodes) is_loss = is_loss || r.lock() == n;
        reached = reached || is_loss || in_graph(*graph, n);
      }
      if (reached) continue;
      v->idle = true;
      if (options.strategy != ShardingStrategy::kNoShard) reshard(v.get());
    }
  }
  if (u->is_root || u->forward_checkpoints) return;
  u->grads_due = 0;
  for (const auto& acc : u->grad_accumulators) u->grads_due += in_graph(*graph, acc) ? 1 : 0;
  u->inputs_due = 0;
  for (const auto& weak : u->input_nodes) u->inputs_due += in_graph(*graph, weak.lock()) ? 1 : 0;
}

int detail::ShardingEngineImpl::backward_next(int forward_index) const {
  while (forward_index >= 0 && forward_index < static_cast<int>(forward_order.size()) &&
         forward_order[static_cast<size_t>(forward_index)]->idle) {
    --forward_index;
  }
  return forward_index;
}

}  // namespace zeroshard
