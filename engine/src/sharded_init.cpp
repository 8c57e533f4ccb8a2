// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/engine/sharded_init.h"

#include <functional>
#include <sstream>
#include <unordered_map>

#include "zeroshard/comm/collective_step.h"
#include "sharded_init_state.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {
// The ShardedInit that shards Units constructed on this thread.
thread_local detail::ShardedInitState* t_active_init = nullptr;
}  // namespace

detail::ShardedInitState::ShardedInitState(Session& s, ShardingOptions o, ShardedInit* owner)
    : session_(s), options_(std::move(o)), owner_(owner) {
  ZS_REQUIRE(t_active_init == nullptr, UsageError,
             "a ShardedInit is already active on this thread; use one at a time");
  t_active_init = this;
}

detail::ShardedInitState* detail::ShardedInitState::active() { return t_active_init; }

void detail::ShardedInitState::deactivate() {
  active_ = false;
  if (t_active_init == this) t_active_init = nullptr;
}

const std::vector<std::unique_ptr<FlatParam>>* detail::ShardedInitState::built_flats(
    const torch::nn::Module* module) const {
  auto it = units_.find(module);
  return it == units_.end() ? nullptr : &it->second;
}

std::vector<std::unique_ptr<FlatParam>> detail::ShardedInitState::take_unit(const torch::nn::Module* module) {
  auto it = units_.find(module);
  ZS_CHECK(it != units_.end(), "ShardedInit: no unit built for module ", module->name());
  std::vector<std::unique_ptr<FlatParam>> flats = std::move(it->second);
  units_.erase(it);
  return flats;
}

namespace {

using UnitFlats = std::map<const torch::nn::Module*, std::vector<std::unique_ptr<FlatParam>>>;

// The unit's own modules (not those of units built inside it, sharded already).
std::vector<std::pair<std::string, torch::nn::Module*>> own_modules(torch::nn::Module& unit, const UnitFlats& units) {
  std::vector<std::pair<std::string, torch::nn::Module*>> own;
  std::vector<std::string> nested_prefixes;
  for (const auto& item : unit.named_modules("", /*include_self=*/true)) {
    const std::string& key = item.key();
    bool nested = !key.empty() && units.count(item.value().get()) > 0;
    if (nested) nested_prefixes.push_back(key + ".");
    for (const std::string& p : nested_prefixes) nested = nested || key.rfind(p, 0) == 0;
    if (!nested) own.emplace_back(key, item.value().get());
  }
  return own;
}

// A parameter of the unit, with the module owning its first name and its key there.
struct FoundParam {
  ParamSlot slot;
  const torch::nn::Module* module;
  std::string key;
};

// The unit's parameters: everything under it except units built before it (nested units), each
// once (further names of a tensor are its aliases). A parameter one of those units holds too is a
// UsageError: tied weights belong in the common parent.
std::vector<FoundParam> unit_params(const torch::nn::Module& unit, const UnitFlats& units) {
  std::vector<FoundParam> found;
  std::unordered_map<const void*, size_t> seen;
  std::unordered_map<const void*, const torch::nn::Module*> owned_elsewhere;
  for (const auto& [m, flats] : units) {
    for (const auto& f : flats) {
      for (const ParamSlot& s : f->slots()) owned_elsewhere[s.param.unsafeGetTensorImpl()] = m;
    }
  }
  std::function<void(const torch::nn::Module&, const std::string&)> visit = [&](const torch::nn::Module& m,
                                                                               const std::string& prefix) {
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      const void* key = item.value().unsafeGetTensorImpl();
      ZS_REQUIRE(owned_elsewhere.count(key) == 0, UsageError, "parameter '", prefix + item.key(), "' of unit ",
                 unit.name(), " is also a parameter of the ", owned_elsewhere[key]->name(),
                 " unit built before it: a parameter shared by two units (tied weights) must be created in their "
                 "common parent, not inside a unit");
      auto it = seen.find(key);
      if (it != seen.end()) {
        found[it->second].slot.aliases.push_back(prefix + item.key());
        continue;
      }
      ParamSlot slot;
      slot.name = prefix + item.key();
      slot.param = item.value();
      seen[key] = found.size();
      found.push_back({std::move(slot), &m, item.key()});
    }
    for (const auto& child : m.named_children()) {
      if (units.count(child.value().get()) > 0) continue;  // a nested unit, sharded already
      visit(*child.value(), prefix + child.key() + ".");
    }
  };
  visit(unit, "");
  return found;
}

}  // namespace

// Offloaded parameters: the unit's shards go to the init's store (made by the first unit). All
// ranks fail together when one cannot store (see ShardingEngineImpl::init_flat_params).
void detail::ShardedInitState::store_shards(const std::string& name,
                                            const std::vector<std::unique_ptr<FlatParam>>& flats) {
  detail::io_on_every_rank(*session_.world(), detail::concat("storing the parameter shards of unit '", name, "'"),
                           "zs.offload.params", [&] {
                             if (store_ == nullptr) {
                               store_ = std::make_unique<ShardStore>(
                                   detail::param_store_options(options_.offload_params, session_.device()),
                                   session_.rank(), mem_.get(), options_.offload_params.io);
                             }
                             for (const auto& f : flats) {
                               if (f->offload_capable()) f->attach_store(store_.get(), options_.keep_param_dtype_shard);
                             }
                           });
}

void detail::ShardedInitState::shard_unit(const torch::nn::Module* module) {
  if (!active_ || units_.count(module) > 0) return;
  auto& unit = const_cast<torch::nn::Module&>(*module);  // still being built: ours to adapt
  const std::vector<std::pair<std::string, torch::nn::Module*>> own = own_modules(unit, units_);
  for (const auto& hook : options_.unit_hooks) hook->on_unit_built(module->name(), own);
  for (const auto& [key, m] : own) in_units_.insert(m);
  std::vector<FoundParam> found = unit_params(*module, units_);
  if (found.empty()) return;
  detail::UnitSlots slots;
  for (FoundParam& f : found) detail::sort_slot(slots, std::move(f.slot), *f.module, f.key, options_);
  if (!groups_ready_) {
    const bool on_cuda = found.front().slot.param.is_cuda();
    groups_ = detail::make_shard_groups(session_, options_, on_cuda);
    groups_ready_ = true;
  }
  const std::string name = detail::concat(module->name(), " #", count_);
  std::vector<std::unique_ptr<FlatParam>> flats =
      detail::make_unit_flats(name, std::move(slots), groups_, mem_.get(), options_);
  // Same unit on every rank, checked before the broadcast below could mismatch.
  std::ostringstream desc;
  desc << "unit " << name << "\n";
  for (const auto& f : flats) desc << detail::describe_flat(*f);
  detail::check_same_description(*session_.world(), desc.str(), detail::concat("units at construction (", name, ")"));
  for (const auto& f : flats) f->check_params();
  Communicator* sync = options_.sync_module_states ? groups_.comm.get() : nullptr;
  for (const auto& f : flats) f->init_from_params(sync);  // leaves the unit resharded
  if (options_.offload_params.target != OffloadTarget::kDevice) store_shards(name, flats);
  units_[module] = std::move(flats);
  ++count_;
}

ShardedInit::ShardedInit(Session& session, ShardingOptions options)
    : impl_(std::make_unique<detail::ShardedInitState>(session, std::move(options), this)) {}

ShardedInit::~ShardedInit() { impl_->deactivate(); }

void ShardedInit::stop() { impl_->deactivate(); }

const ShardedInit* ShardedInit::active() {
  const detail::ShardedInitState* s = detail::ShardedInitState::active();
  return s != nullptr ? s->owner() : nullptr;
}
bool ShardedInit::built_in_unit(const torch::nn::Module* module) const { return impl_->built_in_unit(module); }
const ShardingOptions& ShardedInit::options() const { return impl_->options(); }
int ShardedInit::units_sharded() const { return impl_->units_sharded(); }
const MemoryStats& ShardedInit::memory() const { return *impl_->memory(); }

}  // namespace zeroshard
