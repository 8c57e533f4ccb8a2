// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard::Unit<Impl>: marks a module as a sharded unit (the C++ counterpart of wrapping a
// submodule with FSDP). Use it where you would use the module's own holder:
//
//   struct BlockImpl : torch::nn::Module { ... torch::Tensor forward(torch::Tensor x); };
//   struct GPTImpl : torch::nn::Module {
//     std::vector<zeroshard::Unit<BlockImpl>> blocks;
//     GPTImpl() { for (int i = 0; i < 4; ++i) blocks.push_back(register_module("h" + std::to_string(i), zeroshard::Unit<BlockImpl>(cfg))); }
//     torch::Tensor forward(torch::Tensor x) { for (auto& b : blocks) x = b(x); return x; }
//   };
//
// Registering a Unit registers the module itself, so parameter names are unchanged (a model with
// Units loads the same state dict as one without). A Unit whose module no ShardingEngine manages
// simply calls forward: the same model class trains unsharded. Under an engine, calling the Unit
// gathers the unit's parameters, runs forward, reshards (FULL_SHARD), and hooks the outputs so the
// parameters are gathered again before the unit's backward. Forward must return a tensor, a
// std::vector of tensors or a std::tuple of tensors. LibTorch has no module forward hooks, so a
// unit must be *called through its Unit holder* to be sharded.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace zeroshard {
namespace detail {

class ShardedUnit;

void declare_unit(const torch::nn::Module* module);
bool is_declared_unit(const torch::nn::Module* module);
ShardedUnit* find_managed_unit(const torch::nn::Module* module);
void unit_pre_forward(ShardedUnit* unit);
void unit_post_forward(ShardedUnit* unit, const std::vector<at::Tensor>& outputs);
// A unit's tensor argument as its forward should see it: through an identity autograd node whose
// backward tells the engine this input's gradient is done (units with frozen parameters end their
// backward by it, see engine_hooks.cpp), or unchanged where the engine does not need that.
at::Tensor unit_mark_input(ShardedUnit* unit, const at::Tensor& t);
// An argument of a type that may hold tensors the engine cannot see (a struct, a tuple).
void unit_input_opaque(ShardedUnit* unit);
// Whether a backward pass through the unit's engine runs (a forward now is a recomputation).
bool unit_in_backward(ShardedUnit* unit);
// The dtype a unit's floating inputs are cast to, or nullopt (no mixed precision / no casting).
c10::optional<c10::ScalarType> unit_input_dtype(ShardedUnit* unit);

// Casts floating tensors to `dtype` (when given); everything else passes through unchanged.
inline at::Tensor cast_input(const at::Tensor& t, c10::optional<c10::ScalarType> dtype) {
  return dtype && t.defined() && t.is_floating_point() && t.scalar_type() != *dtype ? t.to(*dtype) : t;
}
template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, at::Tensor>>>
T&& cast_input(T&& value, c10::optional<c10::ScalarType>) {
  return std::forward<T>(value);
}
inline at::Tensor cast_output(at::Tensor t, c10::ScalarType dtype) {
  return t.defined() && t.is_floating_point() && t.scalar_type() != dtype ? t.to(dtype) : t;
}
template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, at::Tensor>>>
T cast_output(T value, c10::ScalarType) {
  return value;
}

inline void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
inline void collect_tensors(const std::vector<at::Tensor>& v, std::vector<at::Tensor>& out) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename... Ts>
void collect_tensors(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... x) { (collect_tensors(x, out), ...); }, t);
}
// The arguments of a unit call, each tensor through unit_mark_input; numbers and strings as they
// are; anything else (may hide tensors) reported with unit_input_opaque.
inline at::Tensor mark_input(ShardedUnit* unit, const at::Tensor& t) { return unit_mark_input(unit, t); }
inline std::vector<at::Tensor> mark_input(ShardedUnit* unit, std::vector<at::Tensor> v) {
  for (at::Tensor& t : v) t = unit_mark_input(unit, t);
  return v;
}
inline c10::optional<at::Tensor> mark_input(ShardedUnit* unit, c10::optional<at::Tensor> t) {
  if (t) t = unit_mark_input(unit, *t);
  return t;
}
template <typename T,
          typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, at::Tensor> &&
                                      !std::is_same_v<std::decay_t<T>, std::vector<at::Tensor>> &&
                                      !std::is_same_v<std::decay_t<T>, c10::optional<at::Tensor>>>>
T&& mark_input(ShardedUnit* unit, T&& value) {
  using V = std::decay_t<T>;
  if constexpr (!std::is_arithmetic_v<V> && !std::is_enum_v<V> && !std::is_convertible_v<const V&, std::string>) {
    unit_input_opaque(unit);
  }
  return std::forward<T>(value);
}
// Non-tensor outputs (numbers, strings) carry no gradient.
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
void collect_tensors(const T&, std::vector<at::Tensor>&) {}

}  // namespace detail

// Calls `module`'s forward as a unit: what Unit::operator() does, for modules held otherwise
// (e.g. picked by the auto-wrap policy). Plain forward when no engine manages the module.
template <typename Impl, typename... Args>
auto call(Impl& module, Args&&... args) {
  detail::ShardedUnit* unit = detail::find_managed_unit(&module);
  if (unit == nullptr) return module.forward(std::forward<Args>(args)...);
  detail::unit_pre_forward(unit);
  const c10::optional<c10::ScalarType> dtype = detail::unit_input_dtype(unit);
  auto out = module.forward(detail::mark_input(unit, detail::cast_input(std::forward<Args>(args), dtype))...);
  std::vector<at::Tensor> tensors;
  detail::collect_tensors(out, tensors);
  detail::unit_post_forward(unit, tensors);
  return out;
}

template <typename Impl>
class Unit : public torch::nn::ModuleHolder<Impl> {
  using Base = torch::nn::ModuleHolder<Impl>;

 public:
  Unit() : Base() { detail::declare_unit(this->get()); }
  Unit(std::nullptr_t) : Base(nullptr) {}  // NOLINT: like ModuleHolder
  Unit(std::shared_ptr<Impl> impl) : Base(std::move(impl)) { detail::declare_unit(this->get()); }  // NOLINT
  template <typename Head, typename... Tail,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<Head>, Unit> &&
                                        !std::is_same_v<std::decay_t<Head>, std::shared_ptr<Impl>> &&
                                        !std::is_same_v<std::decay_t<Head>, std::nullptr_t>>>
  explicit Unit(Head&& head, Tail&&... tail) : Base(std::forward<Head>(head), std::forward<Tail>(tail)...) {
    detail::declare_unit(this->get());
  }

  template <typename... Args>
  auto operator()(Args&&... args) {
    return zeroshard::call(*this->get(), std::forward<Args>(args)...);
  }
};

}  // namespace zeroshard
