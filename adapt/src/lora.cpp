// SPDX-License-Identifier: Apache-2.0
// LoRA adapters: the adapter-carrying Linear, apply() and the merge into plain weights.

#include "zeroshard/adapt/lora.h"

#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>

#include <cmath>
#include <ostream>
#include <unordered_set>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/engine/unit.h"

namespace zeroshard::lora {

LinearImpl::LinearImpl(const torch::nn::LinearOptions& o) : options(o) { reset(); }

void LinearImpl::reset() {
  weight = register_parameter("weight", at::empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias = register_parameter("bias", at::empty({options.out_features()}));
  reset_parameters();
}

// torch::nn::Linear's initialisation (the same draws in the same order): weight Kaiming-uniform
// with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)); bias U(-1/sqrt(in), 1/sqrt(in)).
void LinearImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = options.in_features() > 0 ? 1.0 / std::sqrt(static_cast<double>(options.in_features())) : 0;
    bias.uniform_(-bound, bound);
  }
}

at::Tensor LinearImpl::forward(const at::Tensor& input) {
  at::Tensor y = at::linear(input, weight, bias);
  if (!lora_A.defined()) return y;
  const at::Tensor x = dropout_ > 0 && is_training() ? at::dropout(input, dropout_, /*train=*/true) : input;
  return y + at::linear(at::linear(x, lora_A), lora_B) * scale_;
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "zeroshard::lora::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << (options.bias() ? "true" : "false");
  if (lora_A.defined()) stream << ", lora_rank=" << lora_A.size(0) << ", lora_scale=" << scale_;
  stream << ")";
}

void LinearImpl::add_adapter(int64_t rank, double alpha, double dropout) {
  ZS_REQUIRE(!lora_A.defined(), UsageError, "this zeroshard::lora::Linear already has an adapter");
  const at::TensorOptions o = weight.options();
  at::Tensor a = at::empty({rank, options.in_features()}, o);
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
  }
  lora_A = register_parameter("lora_A", a);
  lora_B = register_parameter("lora_B", at::zeros({options.out_features(), rank}, o));
  scale_ = alpha / static_cast<double>(rank);
  dropout_ = dropout;
}

namespace {

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns) {
    if (glob_match(p, name)) return true;
  }
  return false;
}

}  // namespace

namespace detail {

void check_options(const Options& o) {
  ZS_REQUIRE(o.rank >= 1, UsageError, "lora::Options.rank = ", o.rank, " must be >= 1");
  ZS_REQUIRE(std::isfinite(o.alpha) && o.alpha > 0, UsageError, "lora::Options.alpha = ", format_double(o.alpha),
             " must be finite and > 0");
  ZS_REQUIRE(std::isfinite(o.dropout) && o.dropout >= 0 && o.dropout < 1, UsageError, "lora::Options.dropout = ",
             format_double(o.dropout), " must be in [0, 1)");
  for (size_t i = 0; i < o.targets.size(); ++i) {
    ZS_REQUIRE(!o.targets[i].empty(), UsageError, "lora::Options.targets[", i, "] is empty; give a glob over module names");
  }
}

bool matches_some_path(const std::vector<std::string>& targets, const std::string& relative) {
  if (targets.empty()) return true;
  for (const std::string& g : targets) {
    // Split the pattern where the path could end: after a '.' or a '?' (the dot itself), or
    // inside a '*' (which may take the dot and part of the name).
    for (size_t i = 1; i <= g.size(); ++i) {
      const char last = g[i - 1];
      if ((last == '.' || last == '?') && glob_match(g.substr(i), relative)) return true;
      if (last == '*' && glob_match(g.substr(i - 1), relative)) return true;
    }
  }
  return false;
}

}  // namespace detail

namespace {

void check_rank_fits(const Options& o, const LinearImpl& l, const std::string& name) {
  ZS_REQUIRE(o.rank <= std::min(l.options.in_features(), l.options.out_features()), UsageError, "lora::Options.rank = ",
             o.rank, " exceeds the smaller side of '", name, "' (", l.options.out_features(), " x ",
             l.options.in_features(), "): the update would not be low-rank");
}

}  // namespace

namespace {

class LoraHook;

// apply() with the modules of units sharded as they were built (`built_in_unit`, may be null) and
// whether those units got their adapters then (`hooked`).
std::vector<std::string> apply_to(torch::nn::Module& model, const Options& o,
                                  const std::function<bool(const torch::nn::Module*)>& built_in_unit, bool hooked);

class LoraHook final : public UnitHook {
 public:
  explicit LoraHook(Options o) : options_(std::move(o)) {}
  const Options& options() const { return options_; }
  void on_unit_built(const std::string& unit, const ModuleList& modules) const override {
    detail::adapt_unit(unit, modules, options_);
  }
  void on_wrap(torch::nn::Module& model,
               const std::function<bool(const torch::nn::Module*)>& built_in_unit) const override {
    apply_to(model, options_, built_in_unit, /*hooked=*/true);
  }

 private:
  Options options_;
};

}  // namespace

std::shared_ptr<const UnitHook> unit_hook(const Options& options) {
  detail::check_options(options);
  return std::make_shared<const LoraHook>(options);
}

std::vector<std::string> apply(torch::nn::Module& model, const Options& o) {
  detail::check_options(o);
  // Units a ShardedInit sharded as they were built: adapted then (a LoRA unit hook) or not at all.
  const ShardedInit* init = ShardedInit::active();
  const LoraHook* hook = nullptr;
  if (init != nullptr) {
    for (const auto& h : init->options().unit_hooks) {
      if (auto* l = dynamic_cast<const LoraHook*>(h.get())) hook = l;
    }
  }
  if (hook != nullptr) {
    const Options& was = hook->options();
    ZS_REQUIRE(was.rank == o.rank && was.alpha == o.alpha && was.dropout == o.dropout && was.targets == o.targets,
               UsageError, "lora::apply: the options differ from those of the ShardedInit's LoRA unit hook (rank ",
               was.rank, ", alpha ", format_double(was.alpha), "); pass the same options to both");
  }
  std::function<bool(const torch::nn::Module*)> built;
  if (init != nullptr) built = [init](const torch::nn::Module* m) { return init->built_in_unit(m); };
  return apply_to(model, o, built, hook != nullptr);
}

namespace {

std::vector<std::string> apply_to(torch::nn::Module& model, const Options& o,
                                  const std::function<bool(const torch::nn::Module*)>& built_in_unit, bool hooked) {
  auto sharded = [&](const torch::nn::Module* m) { return built_in_unit && built_in_unit(m); };
  // Everything is checked before anything changes.
  std::vector<std::pair<std::string, LinearImpl*>> picked;  // null: adapted when its unit was sharded
  std::vector<bool> used(o.targets.size(), false);
  for (const auto& item : model.named_modules()) {
    torch::nn::Module* m = item.value().get();
    ZS_REQUIRE(zeroshard::detail::find_managed_unit(m) == nullptr, UsageError, "lora::apply: module '",
               item.key().empty() ? "<root>" : item.key(),
               "' is already sharded by a ShardingEngine; add adapters before wrapping the model");
    for (size_t i = 0; i < o.targets.size(); ++i) used[i] = used[i] || glob_match(o.targets[i], item.key());
    const bool wanted = matches_any(o.targets, item.key());
    // A lora::Linear of a unit sharded as it was built; anything else (a torch::nn::Linear the
    // patterns match included) is checked as below.
    if (auto* l = sharded(m) ? dynamic_cast<LinearImpl*>(m) : nullptr) {
      if (!wanted && !l->has_adapter()) continue;
      ZS_REQUIRE(hooked, UsageError, "lora::apply: '", item.key(),
                 "' was sharded as it was built (ShardedInit) before an adapter could be added: put "
                 "lora::unit_hook(options) into the ShardingOptions' unit_hooks before building the model");
      ZS_REQUIRE(wanted == l->has_adapter(), UsageError, "lora::Options.targets: '", item.key(), "' ",
                 wanted ? "matches by its full name but got no adapter when its unit was sharded"
                        : "got an adapter when its unit was sharded but matches no pattern by its full name",
                 " (under a ShardedInit a unit's path is not known when it is sharded: use patterns that hold "
                 "for every unit alike, such as '*.qkv')");
      picked.emplace_back(item.key(), nullptr);
      continue;
    }
    if (!wanted) continue;
    if (auto* l = dynamic_cast<LinearImpl*>(m)) {
      ZS_REQUIRE(!l->has_adapter(), UsageError, "lora::apply: '", item.key(), "' already has an adapter");
      check_rank_fits(o, *l, item.key());
      picked.emplace_back(item.key(), l);
    } else if (!o.targets.empty() && dynamic_cast<torch::nn::LinearImpl*>(m) != nullptr) {
      ZS_THROW(UsageError, "lora::Options.targets match '", item.key(),
               "', a torch::nn::Linear: declare it as zeroshard::lora::Linear (the same parameters and state "
               "dict; LibTorch cannot re-route a torch::nn::Linear's forward from outside), or narrow the targets");
    }
  }
  for (size_t i = 0; i < o.targets.size(); ++i) {
    ZS_REQUIRE(used[i], UsageError, "lora::Options.targets[", i, "] = '", o.targets[i], "' matches no module of the model");
  }
  ZS_REQUIRE(!picked.empty(), UsageError, "lora::apply: ",
             o.targets.empty() ? std::string("the model has no zeroshard::lora::Linear layer")
                               : "lora::Options.targets match no zeroshard::lora::Linear layer",
             "; nothing would train");
  for (const auto& item : model.named_modules()) {
    if (sharded(item.value().get())) continue;  // frozen but for its adapters when it was sharded
    for (at::Tensor& p : item.value()->parameters(/*recurse=*/false)) p.set_requires_grad(false);
  }
  std::vector<std::string> names;
  for (auto& [name, l] : picked) {
    if (l != nullptr) l->add_adapter(o.rank, o.alpha, o.dropout);
    names.push_back(name);
  }
  return names;
}

}  // namespace

namespace detail {

void adapt_unit(const std::string& unit, const std::vector<std::pair<std::string, torch::nn::Module*>>& modules,
                const Options& o) {
  std::vector<std::pair<std::string, LinearImpl*>> picked;
  for (const auto& [key, m] : modules) {
    auto* l = dynamic_cast<LinearImpl*>(m);
    if (l == nullptr || key.empty() || !matches_some_path(o.targets, key)) continue;
    ZS_REQUIRE(!l->has_adapter(), UsageError, "LoRA unit hook: '", key, "' of unit ", unit,
               " already has an adapter");
    check_rank_fits(o, *l, key);
    picked.emplace_back(key, l);
  }
  for (const auto& [key, m] : modules) {
    for (at::Tensor& p : m->parameters(/*recurse=*/false)) p.set_requires_grad(false);
  }
  for (auto& [key, l] : picked) l->add_adapter(o.rank, o.alpha, o.dropout);
}

}  // namespace detail

std::vector<std::string> adapted_layers(const torch::nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_modules()) {
    const auto* l = dynamic_cast<const LinearImpl*>(item.value().get());
    if (l != nullptr && l->has_adapter()) names.push_back(item.key());
  }
  return names;
}

bool has_leaf(const std::string& name, const std::string& leaf) {
  return name == leaf ||
         (name.size() > leaf.size() && name.compare(name.size() - leaf.size() - 1, leaf.size() + 1, "." + leaf) == 0);
}

std::map<std::string, at::Tensor> merged(const std::map<std::string, at::Tensor>& state, double scale) {
  static const std::string kA = "lora_A", kB = "lora_B";
  std::map<std::string, at::Tensor> out = state;
  for (const auto& entry : state) {
    const std::string& key = entry.first;  // not a structured binding: the lambda below captures it
    const bool is_a = has_leaf(key, kA), is_b = has_leaf(key, kB);
    if (!is_a && !is_b) continue;
    const std::string prefix = key.substr(0, key.size() - kA.size());  // "X." or ""
    const std::string layer = prefix.empty() ? "<root>" : prefix.substr(0, prefix.size() - 1);
    auto find = [&](const std::string& what) {
      auto it = state.find(prefix + what);
      ZS_REQUIRE(it != state.end() && it->second.defined(), UsageError, "lora::merged: layer '", layer, "' has '",
                 key, "' but no '", prefix + what, "'");
      return it->second;
    };
    const at::Tensor w = find("weight"), la = find(kA), lb = find(kB);
    if (is_b) continue;  // merged once, from its lora_A
    ZS_REQUIRE(la.dim() == 2 && lb.dim() == 2 && w.dim() == 2 && lb.size(1) == la.size(0) && lb.size(0) == w.size(0) &&
                   la.size(1) == w.size(1),
               UsageError, "lora::merged: layer '", layer, "' has weight ", w.sizes(), ", lora_A ", la.sizes(),
               ", lora_B ", lb.sizes(), "; expected [out, in], [r, in], [out, r]");
    const at::Tensor delta = at::matmul(lb.to(at::kFloat), la.to(at::kFloat)) * scale;
    out[prefix + "weight"] = (w.to(at::kFloat) + delta).to(w.scalar_type());
    out.erase(prefix + kA);
    out.erase(prefix + kB);
  }
  return out;
}

}  // namespace zeroshard::lora
