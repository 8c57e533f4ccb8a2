// SPDX-License-Identifier: Apache-2.0
// Which modules are declared units (zeroshard::Unit holders), which of them an engine manages, and
// the calls a Unit holder makes into its ShardedUnit (zeroshard/engine/unit.h).
#include <mutex>
#include <unordered_map>

#include "sharded_unit.h"
#include "sharded_init_state.h"

namespace zeroshard::detail {

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>>& declared() {
  static std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>> s;
  return s;
}
std::unordered_map<const torch::nn::Module*, ShardedUnit*>& managed() {
  static std::unordered_map<const torch::nn::Module*, ShardedUnit*> m;
  return m;
}

}  // namespace

void declare_unit(const torch::nn::Module* module) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    declared()[module] = module->weak_from_this();
  }
  if (ShardedInitState* init = ShardedInitState::active()) init->shard_unit(module);
}

bool is_declared_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = declared().find(module);
  if (it == declared().end()) return false;
  if (it->second.expired()) {  // a destroyed Unit's module; this is another module at its address
    declared().erase(it);
    return false;
  }
  return true;
}

void register_managed_unit(const torch::nn::Module* module, ShardedUnit* unit) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  managed()[module] = unit;
}

void unregister_managed_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  managed().erase(module);
}

ShardedUnit* find_managed_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = managed().find(module);
  return it == managed().end() ? nullptr : it->second;
}

void unit_pre_forward(ShardedUnit* unit) { unit->pre_forward(); }
void unit_post_forward(ShardedUnit* unit, const std::vector<at::Tensor>& outputs) { unit->post_forward(outputs); }
at::Tensor unit_mark_input(ShardedUnit* unit, const at::Tensor& t) { return unit->mark_input(t); }
void unit_input_opaque(ShardedUnit* unit) { unit->mark_input_opaque(); }
bool unit_in_backward(ShardedUnit* unit) { return unit->in_backward(); }

c10::optional<c10::ScalarType> unit_input_dtype(ShardedUnit* unit) { return unit->input_dtype(); }

}  // namespace zeroshard::detail
