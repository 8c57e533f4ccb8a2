// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/engine/sharded_init.h"

#include <functional>
#include <sstream>
#include <unordered_map>

#include "zeroshard/comm/collective_step.h"
#include "sharded_init_internal.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace detail {
// The ShardedInit that shards Units constructed on this thread (engine_hooks.cpp calls it).
thread_local detail::ShardedInitImpl* t_active_init = nullptr;
}  // namespace detail

detail::ShardedInitImpl::ShardedInitImpl(Session& s, ShardingOptions o) : session(s), options(std::move(o)) {}

void detail::ShardedInitImpl::deactivate() {
  active = false;
  if (detail::t_active_init == this) detail::t_active_init = nullptr;
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

// Offloaded parameters: the unit's shards go to the init's store (made by the first unit). All
// ranks fail together when one cannot store (see ShardingEngineImpl::init_flat_params).
void store_shards(detail::ShardedInitImpl& init, const std::string& name,
                  const std::vector<std::unique_ptr<FlatParam>>& flats) {
  detail::io_on_every_rank(*init.session.world(), detail::concat("storing the parameter shards of unit '", name, "'"),
                           "zs.offload.params", [&] {
                             if (init.store == nullptr) {
                               init.store = std::make_unique<ShardStore>(init.options.offload_params,
                                                                         init.session.rank(), init.mem.get(),
                                                                         init.options.offload_params.io);
                             }
                             for (const auto& f : flats) {
                               if (f->offload_capable()) {
                                 f->attach_store(init.store.get(), init.options.keep_param_dtype_shard);
                               }
                             }
                           });
}

}  // namespace

void detail::ShardedInitImpl::shard_unit(const torch::nn::Module* module) {
  if (!active || units.count(module) > 0) return;
  auto& unit = const_cast<torch::nn::Module&>(*module);  // still being built: ours to adapt
  const std::vector<std::pair<std::string, torch::nn::Module*>> own = own_modules(unit, units);
  for (const auto& hook : options.unit_hooks) hook->on_unit_built(module->name(), own);
  for (const auto& [key, m] : own) in_units.insert(m);
  std::vector<FoundParam> found = unit_params(*module, units);
  if (found.empty()) return;
  detail::UnitSlots slots;
  for (FoundParam& f : found) detail::sort_slot(slots, std::move(f.slot), *f.module, f.key, options);
  if (!groups_ready) {
    const bool on_cuda = found.front().slot.param.is_cuda();
    groups = detail::make_shard_groups(session, options, on_cuda);
    groups_ready = true;
  }
  const std::string name = detail::concat(module->name(), " #", count);
  std::vector<std::unique_ptr<FlatParam>> flats =
      detail::make_unit_flats(name, std::move(slots), groups, mem.get(), options);
  // Same unit on every rank, checked before the broadcast below could mismatch.
  std::ostringstream desc;
  desc << "unit " << name << "\n";
  for (const auto& f : flats) desc << detail::describe_flat(*f);
  detail::check_same_description(*session.world(), desc.str(), detail::concat("units at construction (", name, ")"));
  for (const auto& f : flats) f->check_params();
  Communicator* sync = options.sync_module_states ? groups.comm.get() : nullptr;
  for (const auto& f : flats) f->init_from_params(sync);  // leaves the unit resharded
  if (options.offload_params.target != OffloadTarget::kDevice) store_shards(*this, name, flats);
  units[module] = std::move(flats);
  ++count;
}

ShardedInit::ShardedInit(Session& session, ShardingOptions options)
    : impl_(std::make_unique<detail::ShardedInitImpl>(session, std::move(options))) {
  impl_->owner = this;
  ZS_REQUIRE(detail::t_active_init == nullptr, UsageError,
             "a ShardedInit is already active on this thread; use one at a time");
  detail::t_active_init = impl_.get();
}

ShardedInit::~ShardedInit() { impl_->deactivate(); }

void ShardedInit::stop() { impl_->deactivate(); }

const ShardedInit* ShardedInit::active() {
  return detail::t_active_init != nullptr ? detail::t_active_init->owner : nullptr;
}
bool ShardedInit::built_in_unit(const torch::nn::Module* module) const { return impl_->in_units.count(module) > 0; }
const ShardingOptions& ShardedInit::options() const { return impl_->options; }
int ShardedInit::units_sharded() const { return impl_->count; }
const MemoryStats& ShardedInit::memory() const { return *impl_->mem; }

}  // namespace zeroshard
