// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model written in Python, trained sharded with no Python at run time: a TorchScript module
// (Python: torch.jit.script(model).save("model.pt"), or torch.jit.trace where scripting is not
// possible) loaded in C++, its sharding units picked by submodule path or type, and handed to the
// ShardingEngine like a C++ model.
//
//   zeroshard::TorchScriptModel model("model.pt", {.units = {"blocks.*"}}, session.device());
//   zeroshard::ShardingEngine engine(session, model.module(), options);
//   auto loss = engine.forward([&] { return loss_fn(model.forward(x), y); });
//   ...
//   model.save(engine.full_state_dict(), "trained.pt");   // torch.jit.load in Python reads it
//
// How: the script module's parameters and buffers are registered, as the same tensors, on a tree
// of torch::nn::Modules mirroring its submodules (module()); the engine shards that tree as it
// shards any model (every parameter becomes a view of its unit's flat buffer, which the script
// module sees, since it holds the same tensors). Each unit's `forward` graph gets zeroshard
// operators (registered with TORCH_LIBRARY) at its start (gather the unit's parameters, cast its
// floating inputs to the compute dtype) and on its result (reshard, hook the output so backward
// gathers again): what zeroshard::Unit does for a C++ module. Activation checkpointing replaces
// the calls of checkpointed units (every `checkpoint_every`-th unit, in the order they are called)
// by an operator that runs the unit's forward under zeroshard::checkpoint. No Python runs.
//
// Limits (each a UsageError naming the submodule, at construction unless said otherwise):
//   - a unit's forward must return a Tensor or a tuple of Tensors; a checkpointed unit's forward
//     must take one Tensor (besides self) and return one Tensor;
//   - a unit's parameters are used through its forward only: a method other than forward called
//     on a unit from the model's code is refused (its parameters would not be gathered);
//   - a unit called twice in one forward pass is refused at run time (a weight-shared recurrent
//     block cannot be a unit; make its parent the unit);
//   - the model is loaded whole on every rank before it is sharded (torch::jit::load reads every
//     tensor): peak host memory at start-up is the whole model; training then holds shards.
// Thread-safety: one training thread, as for the engine.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

namespace zeroshard {

class UnitHook;
namespace lora {
struct Options;
}  // namespace lora

struct TorchScriptOptions {
  // Submodules that become sharded units, by dotted path ("blocks.0") with '*' matching any run
  // of characters inside one path component ("blocks.*", "h*"), or by the script class's name
  // ("Block", the last part of "__torch__.Block"). Everything else belongs to the root unit.
  std::vector<std::string> units;
  std::vector<std::string> unit_types;
  // Activation checkpointing of units: every n-th unit in call order (0, n, 2n, ...).
  bool checkpoint = false;
  int checkpoint_every = 1;
  // TorchScript's graph optimizer during forward (profiling, differentiable subgraphs with
  // TorchScript's autodiff, fusion). Off: the graph's operators run one by one under LibTorch's
  // autograd, as a C++ model's do; with it on, a scripted GPT trained at 0.83x the C++ GPT's
  // tokens/s on CPU, off at 1.0x (bench_torchscript).
  bool optimize_graph = false;
};

class TorchScriptModel {
 public:
  // Loads `path` onto `device`. IoError naming the file when it cannot be loaded; UsageError for
  // no unit matching a pattern (naming the pattern and the submodules there are) or a limit above.
  TorchScriptModel(const std::string& path, const TorchScriptOptions& options, c10::Device device);
  ~TorchScriptModel();
  TorchScriptModel(const TorchScriptModel&) = delete;
  TorchScriptModel& operator=(const TorchScriptModel&) = delete;

  // The tree of modules the engine wraps: parameter and buffer names are the script module's
  // (named_parameters() in Python). train()/eval() on it switch the script module too.
  std::shared_ptr<torch::nn::Module> module() const;
  // The script module's forward (inside engine.forward).
  c10::IValue forward(std::vector<c10::IValue> inputs);
  at::Tensor forward(const at::Tensor& input);
  // The units, in the script module's order.
  const std::vector<std::string>& unit_names() const;

  // LoRA (zeroshard/adapt/lora.h's formula and initialisation) on the torch.nn.Linear submodules
  // whose path matches one of options.targets (globs, '*' any characters; every Linear when
  // empty): lora_A [rank, in] and lora_B [out, rank] become parameters of module()'s tree (not of
  // the script module), the Linear's forward adds dropout(x) A^T B^T * alpha / rank to its output,
  // and every other parameter is frozen. Call before the engine wraps module(). Returns the
  // adapted submodules' paths. UsageError for bad options, a second call, a rank above a layer's
  // smaller side, or no Linear matched (naming the Linear submodules there are). save() folds the
  // adapters into the weights.
  std::vector<std::string> add_lora(const lora::Options& options);
  // The unit hook (ShardingOptions::unit_hooks) that keeps the weight of every torch.nn.Linear
  // submodule in NF4 when it is frozen (precision.frozen_linear = NF4; zeroshard/adapt/nf4.h).
  static std::shared_ptr<const UnitHook> frozen_linear_hook();
  torch::jit::Module& script();

  // Writes `state` (name -> value: ShardingEngine::full_state_dict(), tied names included) into
  // a fresh copy of the file this model was loaded from (its graphs without zeroshard operators)
  // and saves it to `out_path`: Python's torch.jit.load reads it without zeroshard. UsageError
  // naming a parameter or buffer of the model that `state` lacks or has with another shape.
  void save(const std::map<std::string, at::Tensor>& state, const std::string& out_path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zeroshard
