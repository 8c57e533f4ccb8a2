// SPDX-License-Identifier: Apache-2.0
// Which script submodules are units, and the rewrite of their forward graphs (torchscript.h):
//
//   graph(%self : __torch__.Block, %x : Tensor):          graph(%self : __torch__.Block, %x : Tensor):
//     ...                                          ->         = zeroshard::unit_enter(%self)
//     return (%out)                                         %x2 = zeroshard::unit_input(%self, %x)
//                                                           ... (uses %x2)
//                                                           %out2 = zeroshard::unit_exit(%self, %out)
//                                                           return (%out2)
//
// Classes are shared by their instances (h0, h1, ... are one __torch__.Block): a graph is
// rewritten once per class, and the operators find the instance they run for from %self (an
// instance that is not a unit passes through).

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <set>
#include <sstream>

#include "torchscript_internal.h"
#include "zeroshard/base/error.h"

namespace zeroshard::detail {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// '*' matches any run of characters within one dotted component.
bool glob(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t] && text[t] != '.') {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '.' && text[t] == '.') {
      ++p, ++t;
    } else if (star != std::string::npos && text[mark] != '.') {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// "MlpBlock" for __torch__.___torch_mangle_56.MlpBlock.
std::string class_name(const c10::TypePtr& type) {
  auto named = type->cast<c10::NamedType>();
  const std::string q = named && named->name() ? named->name()->qualifiedName() : type->repr_str();
  const size_t dot = q.rfind('.');
  return dot == std::string::npos ? q : q.substr(dot + 1);
}
std::string class_name(const torch::jit::Module& m) { return class_name(m.type()); }

std::shared_ptr<Graph> forward_graph(const torch::jit::Module& m) {
  return torch::jit::toGraphFunction(m.get_method("forward").function()).graph();
}

// Every method graph of every class in the tree, once each.
std::vector<std::shared_ptr<Graph>> all_graphs(const torch::jit::Module& root) {
  std::vector<std::shared_ptr<Graph>> out;
  std::set<const Graph*> seen;
  for (const auto& m : root.modules()) {
    for (const auto& method : m.get_methods()) {
      auto g = torch::jit::toGraphFunction(method.function()).graph();
      if (seen.insert(g.get()).second) out.push_back(g);
    }
  }
  return out;
}

// By address: since LibTorch 2.0 c10::TypePtr (SingletonOrSharedTypePtr) converts implicitly to
// bool and has no operator<, so a std::set<c10::TypePtr> compares every type as `true < true`
// and holds one element that every type matches (found by scripts/check-libtorch2.sh).
std::set<const c10::Type*> unit_types(const ScriptUnits& units) {
  std::set<const c10::Type*> types;
  for (const auto& m : units.modules) types.insert(m.type().get());
  return types;
}

// Every node of `g`, blocks (if/loop bodies) included.
void for_each_node(torch::jit::Block* b, const std::function<void(Node*)>& fn) {
  for (Node* n : b->nodes()) {
    fn(n);
    for (torch::jit::Block* sub : n->blocks()) for_each_node(sub, fn);
  }
}

Node* insert_op(Graph& g, const char* op, const std::vector<Value*>& inputs, size_t outputs, Node* before) {
  Node* n = g.create(c10::Symbol::fromQualString(std::string("zeroshard::") + op), inputs, outputs);
  n->insertBefore(before);
  return n;
}

// Before the first node: `op`(self), then each Tensor argument replaced by unit_input(self, x)
// (the cast to the compute dtype, where mixed precision asks for it).
void insert_entry(Graph& g, const char* op) {
  Value* self = g.inputs()[0];
  Node* first = g.nodes().front();
  insert_op(g, op, {self}, 0, first);
  for (size_t i = 1; i < g.inputs().size(); ++i) {
    Value* x = g.inputs()[i];
    if (!x->type()->isSubtypeOf(*c10::TensorType::get())) continue;
    Node* cast = insert_op(g, "unit_input", {self, x}, 1, first);
    cast->output()->setType(x->type());
    x->replaceAllUsesAfterNodeWith(cast, cast->output());
  }
}

bool is_tensor(const Value* v) { return v->type()->isSubtypeOf(*c10::TensorType::get()); }

// A Tensor, or a tuple whose elements are all Tensors.
bool tensor_or_tensor_tuple(const c10::TypePtr& type) {
  if (type->isSubtypeOf(*c10::TensorType::get())) return true;
  auto tuple = type->cast<c10::TupleType>();
  if (tuple == nullptr) return false;
  for (const auto& e : tuple->elements()) {
    if (!e->isSubtypeOf(*c10::TensorType::get())) return false;
  }
  return true;
}

void rewrite_forward(Graph& g, const std::string& unit) {
  Value* self = g.inputs()[0];
  insert_entry(g, "unit_enter");
  Node* ret = g.return_node();
  ZS_REQUIRE(ret->inputs().size() == 1, UsageError, "unit '", unit, "': its forward returns ", ret->inputs().size(),
             " values; zeroshard handles a Tensor or a tuple of Tensors");
  Value* out = ret->input(0);
  ZS_REQUIRE(tensor_or_tensor_tuple(out->type()), UsageError, "unit '", unit, "': its forward returns ",
             out->type()->repr_str(), "; zeroshard handles units returning a Tensor or a tuple of Tensors");
  if (is_tensor(out)) {
    Node* exit = insert_op(g, "unit_exit", {self, out}, 1, ret);
    exit->output()->setType(out->type());
    ret->replaceInput(0, exit->output());
    return;
  }
  auto tuple = out->type()->expect<c10::TupleType>();
  Node* unpack = g.createTupleUnpack(out)->insertBefore(ret);
  Node* list = g.createList(c10::TensorType::get(), unpack->outputs())->insertBefore(ret);
  Node* exit = insert_op(g, "unit_exit_list", {self, list->output()}, 1, ret);
  exit->output()->setType(c10::ListType::ofTensors());
  Node* items = g.createListUnpack(exit->output(), tuple->elements().size())->insertBefore(ret);
  Node* again = g.createTuple(items->outputs())->insertBefore(ret);
  ret->replaceInput(0, again->output());
}

// A unit's call `%y = prim::CallMethod[name="forward"](%unit, %a, %b)` becomes
//   %xs = prim::ListConstruct(%a, %b); %ys = zeroshard::call_unit(%unit, %xs);
//   %y = prim::ListUnpack(%ys)  (then prim::TupleConstruct when forward returns a tuple)
void replace_by_call_unit(Graph& g, Node* n, const ScriptUnits& units) {
  const c10::TypePtr type = n->input(0)->type();
  std::string which;
  for (size_t i = 0; i < units.modules.size(); ++i) {
    if (units.modules[i].type() == type) which += (which.empty() ? "" : ", ") + units.names[i];
  }
  std::vector<Value*> args(n->inputs().begin() + 1, n->inputs().end());
  for (Value* a : args) {
    ZS_REQUIRE(is_tensor(a), UsageError, "activation checkpointing of unit(s) ", which, ": an argument of their forward is ",
               a->type()->repr_str(), "; a checkpointed unit's forward takes Tensors only");
  }
  ZS_REQUIRE(n->outputs().size() == 1 && tensor_or_tensor_tuple(n->output()->type()), UsageError,
             "activation checkpointing of unit(s) ", which, ": their forward must return a Tensor or a tuple of Tensors");
  Node* list = g.createList(c10::TensorType::get(), args)->insertBefore(n);
  Node* call = insert_op(g, "call_unit", {n->input(0), list->output()}, 1, n);
  call->output()->setType(c10::ListType::ofTensors());
  Value* result = nullptr;
  if (is_tensor(n->output())) {
    Node* items = g.createListUnpack(call->output(), 1)->insertBefore(n);
    items->output()->setType(n->output()->type());
    result = items->output();
  } else {
    auto tuple = n->output()->type()->expect<c10::TupleType>();
    Node* items = g.createListUnpack(call->output(), tuple->elements().size())->insertBefore(n);
    result = g.createTuple(items->outputs())->insertBefore(n)->output();
  }
  n->output()->replaceAllUsesWith(result);
  n->destroy();
}

}  // namespace

ScriptUnits select_units(const torch::jit::Module& root, const TorchScriptOptions& options) {
  ScriptUnits units;
  std::vector<bool> pattern_used(options.units.size()), type_used(options.unit_types.size());
  std::vector<std::string> paths;
  for (const auto& item : root.named_modules()) {
    if (item.name.empty()) continue;  // the root itself
    paths.push_back(item.name);
    bool pick = false;
    for (size_t i = 0; i < options.units.size(); ++i) {
      if (glob(options.units[i], item.name)) pick = pattern_used[i] = true;
    }
    for (size_t i = 0; i < options.unit_types.size(); ++i) {
      if (class_name(item.value) == options.unit_types[i]) pick = type_used[i] = true;
    }
    if (!pick) continue;
    units.index[item.value._ivalue().get()] = units.names.size();
    units.names.push_back(item.name);
    units.modules.push_back(item.value);
  }
  std::ostringstream there;
  for (size_t i = 0; i < paths.size() && i < 12; ++i) there << (i ? ", " : "") << paths[i];
  if (paths.size() > 12) there << ", ...";
  for (size_t i = 0; i < options.units.size(); ++i) {
    ZS_REQUIRE(pattern_used[i], UsageError, "unit pattern '", options.units[i],
               "' matches no submodule of the TorchScript model; its submodules: ", there.str());
  }
  for (size_t i = 0; i < options.unit_types.size(); ++i) {
    ZS_REQUIRE(type_used[i], UsageError, "unit type '", options.unit_types[i],
               "' matches no submodule's class in the TorchScript model; its submodules: ", there.str());
  }
  return units;
}

void check_unit_calls(const torch::jit::Module& root, const ScriptUnits& units) {
  const std::set<const c10::Type*> types = unit_types(units);
  for (const auto& g : all_graphs(root)) {
    for_each_node(g->block(), [&](Node* n) {
      if (n->kind() != c10::prim::CallMethod || n->s(c10::attr::name) == "forward") return;
      const c10::TypePtr t = n->input(0)->type();
      if (!types.count(t.get())) return;
      std::string which;
      for (size_t i = 0; i < units.modules.size(); ++i) {
        if (units.modules[i].type() == t) which += (which.empty() ? "" : ", ") + units.names[i];
      }
      ZS_THROW(UsageError, "the model calls method '", n->s(c10::attr::name), "' of unit(s) ", which,
               " (class ", class_name(t), "); zeroshard gathers a unit's parameters around its forward only: ",
               "call forward, or make a module that calls that method from its forward the unit");
    });
  }
}

std::string script_class_name(const torch::jit::Module& m) { return class_name(m); }

void insert_lora_operator(const torch::jit::Module& linear, const std::string& path) {
  auto g = forward_graph(linear);
  const c10::Symbol op = c10::Symbol::fromQualString("zeroshard::lora_linear");
  bool done = false;
  for_each_node(g->block(), [&](Node* n) { done = done || n->kind() == op; });
  if (done) return;  // the class is shared with an instance adapted before
  Node* ret = g->return_node();
  ZS_REQUIRE(g->inputs().size() == 2 && is_tensor(g->inputs()[1]) && ret->inputs().size() == 1 &&
                 is_tensor(ret->input(0)),
             UsageError, "LoRA on '", path, "': its class Linear has a forward that does not take and return one "
             "Tensor; zeroshard adapts torch.nn.Linear submodules");
  // A Linear that is a unit itself returns through zeroshard::unit_exit: the adapter's term goes
  // before it (its parameters are gathered until then).
  Node* at = ret;
  size_t slot = 0;
  if (Node* producer = ret->input(0)->node();
      producer->kind() == c10::Symbol::fromQualString("zeroshard::unit_exit")) {
    at = producer, slot = 1;
  }
  Value* out = at->input(slot);
  Node* lora = insert_op(*g, "lora_linear", {g->inputs()[0], g->inputs()[1], out}, 1, at);
  lora->output()->setType(out->type());
  at->replaceInput(slot, lora->output());
}

void insert_unit_operators(const torch::jit::Module& root, const ScriptUnits& units, bool checkpoint) {
  std::set<const Graph*> done;
  for (size_t i = 0; i < units.modules.size(); ++i) {
    auto g = forward_graph(units.modules[i]);
    if (done.insert(g.get()).second) rewrite_forward(*g, units.names[i]);
  }
  insert_entry(*forward_graph(root), "model_enter");
  if (!checkpoint) return;
  const std::set<const c10::Type*> types = unit_types(units);
  for (const auto& g : all_graphs(root)) {
    std::vector<Node*> calls;
    for_each_node(g->block(), [&](Node* n) {
      if (n->kind() == c10::prim::CallMethod && n->s(c10::attr::name) == "forward" &&
          types.count(n->input(0)->type().get())) {
        calls.push_back(n);
      }
    });
    for (Node* n : calls) replace_by_call_unit(*g, n, units);
  }
}

}  // namespace zeroshard::detail
