// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoRA (low-rank adapters) for fine-tuning under a memory budget: a frozen base and, on chosen
// linear layers, trainable rank-r adapters A [r, in] and B [out, r],
//
//   y = x W^T + b + dropout(x) A^T B^T * (alpha / r)        (A: Kaiming-uniform, B: zero at start)
//
// so training starts from exactly the base model and only A and B get gradients and optimizer
// state (the engine gives frozen parameters neither).
//
//   struct BlockImpl : torch::nn::Module {
//     zeroshard::lora::Linear qkv{nullptr};   // instead of torch::nn::Linear: same parameters
//     ...
//   };
//   auto model = Gpt(cfg);
//   zeroshard::lora::apply(*model, {8, 16.0, 0.05, {"*.qkv", "*.proj"}});  // before wrapping
//   zeroshard::ShardingEngine engine(session, model.ptr(), options);
//   ...
//   auto plain = zeroshard::lora::merged(engine.full_state_dict(), 16.0 / 8);  // W + B A alpha/r
//
// zeroshard::lora::Linear is torch::nn::Linear (the same "weight" and "bias", the same state
// dict and initialisation) that can carry an adapter ("lora_A", "lora_B"). LibTorch cannot
// re-route a torch::nn::Linear's forward from outside, so apply() names every torch::nn::Linear
// its patterns match as an error instead of silently skipping it.

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/engine/unit_hook.h"

namespace zeroshard::lora {

struct Options {
  int64_t rank = 8;
  double alpha = 16;   // the adapter's output is scaled by alpha / rank
  double dropout = 0;  // on the adapter's input, in training mode
  // Globs over module names ("h*.qkv", "*.fc"): '*' any characters, dots included. Empty: every
  // zeroshard::lora::Linear of the model.
  std::vector<std::string> targets;
};

class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features) : LinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const torch::nn::LinearOptions& options);
  void reset() override;
  void reset_parameters();
  at::Tensor forward(const at::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  // Adds an adapter (UsageError if it has one): lora_A Kaiming-uniform as torch::nn::Linear's
  // weight, lora_B zero, both on the weight's device and dtype; freezes nothing (apply() does).
  void add_adapter(int64_t rank, double alpha, double dropout);
  bool has_adapter() const { return lora_A.defined(); }
  double scale() const { return scale_; }

  torch::nn::LinearOptions options;
  at::Tensor weight, bias;
  at::Tensor lora_A, lora_B;  // undefined without an adapter

 private:
  double scale_ = 0;
  double dropout_ = 0;
};
TORCH_MODULE(Linear);

// The unit hook (ShardingOptions::unit_hooks) that adds LoRA to a model the engine wraps: under a
// ShardedInit each unit gets its adapters as it is built (its path is not known yet, so a pattern
// matches a layer when it matches some path followed by the layer's name inside the unit: "*.qkv"
// and "h*.qkv" do, "h0.qkv" matches the qkv of every block), and when the engine wraps the model
// the hook runs apply() on it (the layers outside units, freezing the rest, and a check by full
// name that every unit got exactly the adapters the patterns ask for). UsageError for bad options.
std::shared_ptr<const UnitHook> unit_hook(const Options& options);

// Adds adapters to the zeroshard::lora::Linear layers that `options.targets` match and freezes
// every other parameter of `model`; returns the adapted layers' names. Call before wrapping the
// model in a ShardingEngine, or let the engine call it through unit_hook() (needed with a
// ShardedInit: units it sharded without the hook cannot get adapters, a UsageError naming the
// layer). UsageError naming lora::Options.<field> for a bad rank, alpha or dropout, a
// pattern that matches no module, or a torch::nn::Linear it matches; UsageError when the model is
// already wrapped or a layer already has an adapter. Changes nothing when it throws.
std::vector<std::string> apply(torch::nn::Module& model, const Options& options);

// The qualified names of the model's zeroshard::lora::Linear layers that carry an adapter.
std::vector<std::string> adapted_layers(const torch::nn::Module& model);

// A plain state dict from `state` (e.g. full_state_dict(), or a checkpoint's consolidated
// tensors) of a model with adapters: for every "X.lora_A" / "X.lora_B" pair, "X.weight" becomes
// weight + lora_B lora_A * `scale` (alpha / rank; computed in fp32, stored in the weight's dtype)
// and the pair is dropped; everything else is kept as it is. UsageError naming the layer when half
// a pair or its weight is missing or the shapes disagree.
std::map<std::string, at::Tensor> merged(const std::map<std::string, at::Tensor>& state, double scale);

namespace detail {
// Whether some path P makes P + "." + `relative` match one of `targets` (all of them when empty):
// how the unit hook matches layers inside a unit whose path is not known yet.
bool matches_some_path(const std::vector<std::string>& targets, const std::string& relative);
// Validates `options` as apply() does (UsageError naming the field).
void check_options(const Options& options);
// The unit hook's work on one unit being built: `modules` are the unit's own modules with names
// relative to it (nested units left out). Adds the adapters the targets match (some path followed
// by the name), freezes every other parameter of those modules. UsageError for a rank larger than
// a layer allows, before anything changes.
void adapt_unit(const std::string& unit, const UnitHook::ModuleList& modules, const Options& options);
}  // namespace detail

// Whether the qualified name `name` is `leaf` or ends in "." + leaf ("h0.qkv.lora_A", "lora_A").
bool has_leaf(const std::string& name, const std::string& leaf);

}  // namespace zeroshard::lora
