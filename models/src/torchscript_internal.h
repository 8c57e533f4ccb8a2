// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to TorchScriptModel (torchscript.cpp, torchscript_graph.cpp): the mirror tree's nodes,
// which submodules are units, and the graph rewrite that makes units call zeroshard's operators.

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "zeroshard/models/torchscript.h"

namespace zeroshard::detail {

class ShardedUnit;

// One script submodule as a torch::nn::Module holding the same parameter and buffer tensors,
// under the same names (so the engine, checkpoints and state dicts see the script's names).
class ScriptNode : public torch::nn::Module {
 public:
  // `generation` counts the model's forward passes (the root's begin_pass, from its forward).
  ScriptNode(torch::jit::Module script, std::string path, std::uint64_t* generation);
  // The model's forward starts (called on the root).
  void begin_pass();
  // A unit's forward starts: UsageError when it already ran in this pass (not a recomputation).
  void enter(ShardedUnit* unit);
  // Also switches the script module (the root does it for all of them).
  void train(bool on = true) override;
  const std::string& path() const { return path_; }
  const torch::jit::Module& script() const { return script_; }
  bool checkpointed = false;
  // The script class's name ("Linear" for torch.nn.Linear, "Block"): which submodules LoRA and
  // NF4 storage apply to.
  std::string class_name;
  // A LoRA adapter (TorchScriptModel::add_lora): lora_A and lora_B are parameters of this node
  // only; zeroshard::lora_linear adds their term to the Linear's output.
  bool adapted = false;
  at::Tensor lora_A, lora_B;  // the registered parameters (the engine changes their data in place)
  double lora_scale = 0;
  double lora_dropout = 0;
  // Forward takes no argument besides tensors, numbers, booleans and strings (others may hold
  // tensors that zeroshard::unit_input does not see; the engine needs all for units with frozen
  // parameters, see unit_mark_input).
  bool inputs_known = false;

 private:
  torch::jit::Module script_;
  std::string path_;
  std::uint64_t* generation_;
  std::uint64_t entered_generation_ = 0;
};

void register_node(const c10::ivalue::Object* object, ScriptNode* node);
void unregister_node(const c10::ivalue::Object* object);

struct ScriptUnits {
  std::vector<std::string> names;                                 // in the module's order
  std::vector<torch::jit::Module> modules;                        // the same order
  std::unordered_map<const c10::ivalue::Object*, size_t> index;  // object -> position
};

// The submodules TorchScriptOptions picks. UsageError naming a pattern or type that matches
// nothing, with the submodules there are.
ScriptUnits select_units(const torch::jit::Module& root, const TorchScriptOptions& options);
// UsageError naming the unit when the model's code calls a method other than forward on it.
void check_unit_calls(const torch::jit::Module& root, const ScriptUnits& units);
// Inserts the unit operators into every unit class's forward graph and the model operators into
// the root's (and, with `checkpoint`, replaces the units' calls by zeroshard::call_unit).
// UsageError naming the unit for a forward that returns neither a Tensor nor a tuple of Tensors,
// or, checkpointed, takes an argument that is not a Tensor.
void insert_unit_operators(const torch::jit::Module& root, const ScriptUnits& units, bool checkpoint);

// "Linear" for __torch__.torch.nn.modules.linear.___torch_mangle_3.Linear.
std::string script_class_name(const torch::jit::Module& m);

// Makes the forward graph of `linear`'s class (a torch.nn.Linear: forward(self, input) returning a
// Tensor) return zeroshard::lora_linear(self, input, output); once per class (instances without an
// adapter pass through). UsageError naming `path` for a forward of another shape.
void insert_lora_operator(const torch::jit::Module& linear, const std::string& path);

}  // namespace zeroshard::detail
