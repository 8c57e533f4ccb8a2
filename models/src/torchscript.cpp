// SPDX-License-Identifier: Apache-2.0
// TorchScriptModel (torchscript.h): the module tree the engine wraps, the zeroshard operators a
// unit's forward graph calls, and the export into a pristine copy of the file. The graph rewrite
// itself is in torchscript_graph.cpp.

#include "zeroshard/models/torchscript.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/library.h>
#include <torch/nn/module.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "torchscript_internal.h"
#include "zeroshard/base/error.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/adapt/nf4.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/engine/unit_hook.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/engine/unit.h"
#include "zeroshard/io/replace_file.h"

namespace zeroshard {
namespace detail {
namespace {

// Script object -> the node of the mirror tree that holds its parameters.
std::mutex g_mu;
std::unordered_map<const c10::ivalue::Object*, ScriptNode*>& registry() {
  static auto* r = new std::unordered_map<const c10::ivalue::Object*, ScriptNode*>();
  return *r;
}

ScriptNode* find_node(const c10::IValue& self) {
  if (!self.isObject()) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry().find(self.toObject().get());
  return it == registry().end() ? nullptr : it->second;
}

// The TorchScript interpreter turns an exception thrown by an operator into a std::runtime_error
// carrying its own traceback; the operators keep the original here so TorchScriptModel::forward
// rethrows it with its type (a UsageError, an out-of-memory or communication error) intact.
thread_local std::exception_ptr t_op_error;

template <typename Fn>
auto keeping_error(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    if (!t_op_error) t_op_error = std::current_exception();  // the innermost (nested forwards)
    throw;
  }
}

// ---- the operators a unit's graph calls -------------------------------------------------------

void op_unit_enter(const c10::IValue& self) {
  ScriptNode* node = find_node(self);
  if (node == nullptr) return;  // an instance of a unit's class that is not a unit itself
  ShardedUnit* unit = find_managed_unit(node);
  if (unit == nullptr) return;  // no engine (yet): plain forward
  keeping_error([&] {
    node->enter(unit);
    unit_pre_forward(unit);
    if (!node->inputs_known) unit_input_opaque(unit);
  });
}

at::Tensor op_unit_input(const c10::IValue& self, at::Tensor x) {
  ScriptNode* node = find_node(self);
  ShardedUnit* unit = node != nullptr ? find_managed_unit(node) : nullptr;
  if (unit == nullptr) return x;
  return unit_mark_input(unit, cast_input(x, unit_input_dtype(unit)));
}

at::Tensor op_unit_exit(const c10::IValue& self, at::Tensor x) {
  ScriptNode* node = find_node(self);
  ShardedUnit* unit = node != nullptr ? find_managed_unit(node) : nullptr;
  if (unit != nullptr) keeping_error([&] { unit_post_forward(unit, {x}); });
  return x;
}

std::vector<at::Tensor> op_unit_exit_list(const c10::IValue& self, std::vector<at::Tensor> xs) {
  ScriptNode* node = find_node(self);
  ShardedUnit* unit = node != nullptr ? find_managed_unit(node) : nullptr;
  if (unit != nullptr) keeping_error([&] { unit_post_forward(unit, xs); });
  return xs;
}

// The end of a torch.nn.Linear's forward (add_lora): y + scale * lora_B(lora_A(dropout(x))) for
// an adapted instance, y for the others.
at::Tensor op_lora_linear(const c10::IValue& self, at::Tensor x, at::Tensor y) {
  ScriptNode* node = find_node(self);
  if (node == nullptr || !node->adapted) return y;
  return keeping_error([&] {
    const at::Tensor& a = node->lora_A;
    const at::Tensor& b = node->lora_B;
    const at::Tensor in = node->lora_dropout > 0 ? at::dropout(x, node->lora_dropout, node->is_training()) : x;
    return y + at::linear(at::linear(in.to(a.scalar_type()), a), b).to(y.scalar_type()) * node->lora_scale;
  });
}

// The model's forward starts: a new forward pass (units may run once each again).
void op_model_enter(const c10::IValue& self) {
  ScriptNode* node = find_node(self);
  if (node != nullptr) node->begin_pass();
}

std::vector<at::Tensor> as_tensors(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> out;
  for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toTensor());
  return out;
}

// A call of a unit's forward from its parent, Tensors in and a Tensor or a tuple of Tensors out
// (as a list): checkpointed when the unit is one of the checkpointed ones, a plain call otherwise.
std::vector<at::Tensor> op_call_unit(const c10::IValue& unit, std::vector<at::Tensor> xs) {
  ScriptNode* node = find_node(unit);
  torch::jit::Module m(unit.toObject());
  // The forward's graph-optimizer setting (TorchScriptOptions::optimize_graph) also for the
  // recomputation, which runs in backward, outside TorchScriptModel::forward.
  const bool optimize = torch::jit::getGraphExecutorOptimize();
  auto run = [m, optimize](const std::vector<at::Tensor>& in) mutable {
    torch::jit::GraphOptimizerEnabledGuard same_as_forward(optimize);
    return as_tensors(m.forward(std::vector<c10::IValue>(in.begin(), in.end())));
  };
  if (node == nullptr || !node->checkpointed) return run(xs);
  if (c10::GradMode::is_enabled()) {
    bool any = false;
    for (const auto& x : xs) any = any || (x.defined() && x.requires_grad());
    keeping_error([&] {
      ZS_REQUIRE(any, UsageError, "activation checkpointing of unit '", node->path(),
                 "': none of its inputs requires grad, so its parameters would get no gradient (a checkpointed unit "
                 "called directly on the model's input?); do not checkpoint this unit (checkpoint_every, or another "
                 "unit pattern)");
    });
  }
  return keeping_error([&] { return zeroshard::checkpoint_multi(run, xs); });
}

}  // namespace

// Conservative alias analysis: the graph executor must keep these calls (they have effects) and
// assume their outputs may alias anything.
TORCH_LIBRARY(zeroshard, m) {
  const auto conservative = c10::AliasAnalysisKind::CONSERVATIVE;
  m.def(torch::schema("unit_enter(Any self) -> ()", conservative), op_unit_enter);
  m.def(torch::schema("unit_input(Any self, Tensor x) -> Tensor", conservative), op_unit_input);
  m.def(torch::schema("unit_exit(Any self, Tensor x) -> Tensor", conservative), op_unit_exit);
  m.def(torch::schema("unit_exit_list(Any self, Tensor[] xs) -> Tensor[]", conservative), op_unit_exit_list);
  m.def(torch::schema("model_enter(Any self) -> ()", conservative), op_model_enter);
  m.def(torch::schema("call_unit(Any unit, Tensor[] xs) -> Tensor[]", conservative), op_call_unit);
  m.def(torch::schema("lora_linear(Any self, Tensor x, Tensor y) -> Tensor", conservative), op_lora_linear);
}

void register_node(const c10::ivalue::Object* object, ScriptNode* node) {
  std::lock_guard<std::mutex> lock(g_mu);
  registry()[object] = node;
}

void unregister_node(const c10::ivalue::Object* object) {
  std::lock_guard<std::mutex> lock(g_mu);
  registry().erase(object);
}

// ---- the mirror tree ----------------------------------------------------------------------------

ScriptNode::ScriptNode(torch::jit::Module script, std::string path, std::uint64_t* generation)
    : class_name(script_class_name(script)), script_(std::move(script)), path_(std::move(path)), generation_(generation) {
  for (const auto& p : script_.named_parameters(/*recurse=*/false)) {
    register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : script_.named_buffers(/*recurse=*/false)) register_buffer(b.name, b.value);
  if (auto forward = script_.find_method("forward")) {
    const auto& args = forward->function().getSchema().arguments();
    inputs_known = true;
    for (size_t i = 1; i < args.size(); ++i) {
      const c10::TypePtr& t = args[i].type();
      const bool plain = t->isSubtypeOf(*c10::TensorType::get()) || t->kind() == c10::TypeKind::IntType ||
                         t->kind() == c10::TypeKind::FloatType || t->kind() == c10::TypeKind::BoolType ||
                         t->kind() == c10::TypeKind::StringType || t->kind() == c10::TypeKind::NoneType;
      inputs_known = inputs_known && plain;
    }
  }
}

void ScriptNode::enter(ShardedUnit* unit) {
  // A recomputation (activation checkpoint, inside backward) runs the forward again: allowed.
  const bool recompute = unit_in_backward(unit);
  ZS_REQUIRE(recompute || entered_generation_ != *generation_, UsageError, "unit '", path_,
             "' was called twice in one forward pass; zeroshard gathers a unit once per pass (a weight-shared "
             "block cannot be a unit: make its parent the unit)");
  if (!recompute) entered_generation_ = *generation_;
}

void ScriptNode::begin_pass() { ++*generation_; }

void ScriptNode::train(bool on) {
  torch::nn::Module::train(on);
  if (path_.empty()) script_.train(on);  // the root switches the whole script module
}

}  // namespace detail

// ---- TorchScriptModel ------------------------------------------------------------------------

struct TorchScriptModel::Impl {
  std::string path;
  TorchScriptOptions options;
  torch::jit::Module script;
  std::shared_ptr<detail::ScriptNode> root;
  std::vector<std::string> unit_names;
  std::vector<const c10::ivalue::Object*> registered;
  std::uint64_t generation = 0;
  double lora_scale = 0;  // alpha / rank of the adapters add_lora added; 0: none
  std::vector<std::shared_ptr<detail::ScriptNode>> nodes;  // every node of the tree, in module order

  ~Impl() {
    for (const auto* o : registered) detail::unregister_node(o);
  }
};

TorchScriptModel::TorchScriptModel(const std::string& path, const TorchScriptOptions& options, c10::Device device)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->options = options;
  try {
    impl_->script = torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    ZS_THROW(IoError, "cannot load TorchScript module '", path, "': ", e.what_without_backtrace());
  }
  const detail::ScriptUnits units = detail::select_units(impl_->script, options);
  detail::check_unit_calls(impl_->script, units);
  // The mirror tree, node per submodule, with the same names; units declared to the engine.
  std::function<std::shared_ptr<detail::ScriptNode>(const torch::jit::Module&, const std::string&)> build =
      [&](const torch::jit::Module& m, const std::string& path) {
        auto node = std::make_shared<detail::ScriptNode>(m, path, &impl_->generation);
        impl_->nodes.push_back(node);
        detail::register_node(m._ivalue().get(), node.get());
        impl_->registered.push_back(m._ivalue().get());
        for (const auto& child : m.named_children()) {
          auto c = build(child.value, path.empty() ? child.name : path + "." + child.name);
          node->register_module(child.name, c);
        }
        auto u = units.index.find(m._ivalue().get());
        if (u != units.index.end()) {
          detail::declare_unit(node.get());
          node->checkpointed = options.checkpoint && u->second % std::max(1, options.checkpoint_every) == 0;
        }
        return node;
      };
  impl_->root = build(impl_->script, "");
  impl_->unit_names = units.names;
  detail::insert_unit_operators(impl_->script, units, options.checkpoint);
}

TorchScriptModel::~TorchScriptModel() = default;

std::shared_ptr<torch::nn::Module> TorchScriptModel::module() const { return impl_->root; }

c10::IValue TorchScriptModel::forward(std::vector<c10::IValue> inputs) {
  detail::t_op_error = nullptr;
  // Off by default: the profiling executor's differentiable subgraphs run backward through
  // TorchScript's own autodiff, measured slower than LibTorch's autograd on the same operators
  // (docs/torchscript.md, Speed). The setting is per thread; the guard restores the caller's.
  torch::jit::GraphOptimizerEnabledGuard optimizer(impl_->options.optimize_graph);
  try {
    return impl_->script.forward(std::move(inputs));
  } catch (const std::exception&) {
    std::exception_ptr original = std::exchange(detail::t_op_error, nullptr);
    if (original) std::rethrow_exception(original);
    throw;
  }
}

at::Tensor TorchScriptModel::forward(const at::Tensor& input) { return forward(std::vector<c10::IValue>{input}).toTensor(); }

const std::vector<std::string>& TorchScriptModel::unit_names() const { return impl_->unit_names; }

std::vector<std::string> TorchScriptModel::add_lora(const lora::Options& o) {
  lora::detail::check_options(o);
  ZS_REQUIRE(impl_->lora_scale == 0, UsageError, "TorchScriptModel::add_lora on '", impl_->path,
             "': the model has adapters already");
  std::vector<std::shared_ptr<detail::ScriptNode>> chosen;
  std::string linears;
  for (const auto& node : impl_->nodes) {
    if (node->class_name != "Linear") continue;
    linears += (linears.empty() ? "" : ", ") + node->path();
    bool match = o.targets.empty();
    for (const std::string& t : o.targets) match = match || glob_match(t, node->path());
    if (match) chosen.push_back(node);
  }
  ZS_REQUIRE(!chosen.empty(), UsageError, "LoRA on '", impl_->path, "': no torch.nn.Linear submodule matches lora.targets (",
             o.targets.empty() ? std::string("empty: every Linear") : detail::concat(o.targets.size(), " pattern(s)"),
             "); its Linear submodules: ", linears.empty() ? std::string("none") : linears);
  // Every parameter frozen, then the adapters added (trainable).
  for (const auto& p : impl_->root->parameters()) p.set_requires_grad(false);
  std::vector<std::string> names;
  for (const auto& node : chosen) {
    const auto params = node->named_parameters(/*recurse=*/false);
    const at::Tensor* w = params.find("weight");
    ZS_REQUIRE(w != nullptr && w->dim() == 2, UsageError, "LoRA on '", node->path(),
               "': a Linear without a 2-D weight");
    const int64_t out = w->size(0), in = w->size(1);
    ZS_REQUIRE(o.rank <= std::min(in, out), UsageError, "LoRA on '", node->path(), "': lora.rank ", o.rank,
               " exceeds the layer's smaller side (", in, " inputs, ", out, " outputs)");
    at::Tensor a = at::empty({o.rank, in}, w->options().requires_grad(false));
    {
      at::NoGradGuard no_grad;
      torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));  // as torch.nn.Linear's weight (lora.h)
    }
    node->lora_A = node->register_parameter("lora_A", a);
    node->lora_B = node->register_parameter("lora_B", at::zeros({out, o.rank}, w->options()));
    node->adapted = true;
    node->lora_scale = o.alpha / static_cast<double>(o.rank);
    node->lora_dropout = o.dropout;
    detail::insert_lora_operator(node->script(), node->path());
    names.push_back(node->path());
  }
  impl_->lora_scale = o.alpha / static_cast<double>(o.rank);
  return names;
}

namespace {
// precision.frozen_linear = NF4 for TorchScript models: the weight of every frozen torch.nn.Linear
// submodule (a node of the mirror tree of class Linear) is stored in NF4.
class ScriptFrozenLinearHook final : public UnitHook {
 public:
  std::shared_ptr<const ShardCodec> codec_for(const torch::nn::Module& owner, const std::string& key) const override {
    const auto* node = dynamic_cast<const detail::ScriptNode*>(&owner);
    return node != nullptr && node->class_name == "Linear" && key == "weight" ? nf4::codec() : nullptr;
  }
};
}  // namespace

std::shared_ptr<const UnitHook> TorchScriptModel::frozen_linear_hook() {
  return std::make_shared<const ScriptFrozenLinearHook>();
}

torch::jit::Module& TorchScriptModel::script() { return impl_->script; }

void TorchScriptModel::save(const std::map<std::string, at::Tensor>& state, const std::string& out_path) const {
  torch::jit::Module fresh = torch::jit::load(impl_->path, c10::Device(c10::kCPU));
  at::NoGradGuard no_grad;
  // Adapters are folded into their Linear's weight: the file has no place for them.
  const std::map<std::string, at::Tensor> plain = impl_->lora_scale > 0 ? lora::merged(state, impl_->lora_scale) : state;
  auto put = [&](const std::string& name, at::Tensor t, const char* what) {
    auto it = plain.find(name);
    ZS_REQUIRE(it != plain.end(), UsageError, "TorchScriptModel::save: the state has no ", what, " '", name,
               "' of '", impl_->path, "'");
    ZS_REQUIRE(it->second.sizes() == t.sizes(), UsageError, "TorchScriptModel::save: ", what, " '", name, "' is ",
               it->second.sizes(), " in the state, ", t.sizes(), " in '", impl_->path, "'");
    t.copy_(it->second);
  };
  for (const auto& p : fresh.named_parameters()) put(p.name, p.value, "parameter");
  for (const auto& b : fresh.named_buffers()) put(b.name, b.value, "buffer");
  // Under a temporary name, then renamed: a run that dies while saving leaves no truncated module.
  const std::string tmp = temp_name_for(out_path);
  try {
    fresh.save(tmp);
  } catch (const c10::Error& e) {
    ::unlink(tmp.c_str());
    ZS_THROW(IoError, "cannot write the trained TorchScript module to '", tmp, "' (for '", out_path,
             "'): ", e.what_without_backtrace());
  }
  replace_with_temp(tmp, out_path);
}

}  // namespace zeroshard
