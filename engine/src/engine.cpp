// SPDX-License-Identifier: Apache-2.0
// ShardingEngine: construction (groups, units, structure check, flat parameters) and the
// optimizer side (clipping, step, zero_grad, state). A unit's lifecycle is in sharded_unit.cpp,
// the pass as a whole in engine_root.cpp (what a backward will run: engine_graph.cpp), the offload
// stores and the optimizer's pager in engine_offload.cpp, the unit-order check in unit_order.cpp.
#include "buffers.h"
#include "engine_internal.h"
#include "sharded_init_state.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/base/format.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/memory_report.h"

namespace zeroshard {

namespace detail {
void register_managed_unit(const torch::nn::Module* module, ShardedUnit* unit);
void unregister_managed_unit(const torch::nn::Module* module);
}  // namespace detail

detail::ShardingEngineImpl::ShardingEngineImpl(Session& s, std::shared_ptr<torch::nn::Module> m, ShardingOptions o,
                           detail::ShardedInitState* sharded_init)
    : session(s), model(std::move(m)), options(std::move(o)), init(sharded_init), stores(session, options),
      schedule(units, options.limit_all_gathers) {
  if (init != nullptr) {
    init->deactivate();
    mem = init->memory();
  }
  ZS_REQUIRE(!options.autocast || options.param_dtype == c10::kFloat, UsageError,
             "ShardingOptions: autocast keeps fp32 parameters; set param_dtype = Float (autocast_dtype picks the "
             "compute dtype)");
  ZS_REQUIRE(model != nullptr, UsageError, "ShardingEngine needs a model, got a null module");
  // A step running during backward reads the gradients: it finishes before they are scaled, and
  // step() keeps it only if every factor is 1.
  gradients.before_scale = [this](double factor) {
    if (!overlap.armed()) return;
    settle_overlap();
    check_overlap_grads(/*after_known_scale=*/false);
    if (factor != 1.0) overlap.changed = true;
  };
  gradients.after_scale = [this] { check_overlap_grads(/*after_known_scale=*/true); };
  ZS_REQUIRE(detail::find_managed_unit(model.get()) == nullptr, UsageError,
             "this model is already wrapped by another ShardingEngine; wrap a module once");
  // Adapters finish the model before its units are found (unit_hook.h).
  const std::function<bool(const torch::nn::Module*)> built_in_unit = [this](const torch::nn::Module* m) {
    return init != nullptr && init->built_in_unit(m);
  };
  for (const auto& hook : options.unit_hooks) hook->on_wrap(*model, built_in_unit);
  setup_groups();
  ZS_REQUIRE(options.reduce_quant_block == 0 || std::string_view(groups.shard_group->backend()) == "mpi", ConfigError,
             "sharding.reduce_quantization = INT8 runs on the MPI backend (CPU tensors) only, but the shard group "
             "'", groups.shard_group->name(), "' is on the ", groups.shard_group->backend(),
             " backend; set sharding.reduce_quantization = NONE for a model on a GPU");
  const std::vector<at::Tensor> params = model->parameters();
  streams = std::make_unique<DeviceStreams>(params.empty() ? c10::Device(c10::kCPU) : params.front().device());
  discover_units();
  order = std::make_unique<detail::UnitOrderCheck>(*session.world(), *groups.host_shard_group,
                                                   groups.host_replicate_group.get(), units);
  check_same_structure();
  check_parameters();  // before any flat parameter is built: a refused wrap changes nothing
  init_flat_params();
  for (auto& u : units) u->install_grad_hooks();
  for (auto& u : units) detail::register_managed_unit(u->module, u.get());
}

void detail::ShardingEngineImpl::setup_groups() {
  if (init != nullptr && init->groups() != nullptr) {
    groups = *init->groups();
    return;
  }
  const bool on_cuda = !model->parameters().empty() && model->parameters().front().is_cuda();
  groups = detail::make_shard_groups(session, options, on_cuda);
}

namespace {

bool is_container(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&m) != nullptr;
}

}  // namespace

// The modules the auto-wrap policy makes units (declared Units are units anyway). MODULE_TYPE:
// every module whose Module::name() is one of the types. SIZE_BASED, FSDP's rule, bottom-up: a
// module is wrapped when the parameters under it that no unit below it took reach
// auto_wrap_min_params; never the root, never a Sequential or ModuleList itself (their children
// are the candidates), wherever the module is held (a container, or a std::vector of blocks
// registered on their parent). A policy that picks nothing is a ConfigError.
std::unordered_set<const torch::nn::Module*> detail::ShardingEngineImpl::auto_wrap_picks() const {
  std::unordered_set<const torch::nn::Module*> picked;
  const AutoWrapPolicy policy = options.auto_wrap_policy;
  if (policy == AutoWrapPolicy::kModuleType) {
    ZS_REQUIRE(!options.auto_wrap_module_types.empty(), ConfigError, "sharding.auto_wrap_policy = MODULE_TYPE needs "
               "the module types to wrap (sharding.auto_wrap_module_types, e.g. \"torch::nn::Linear,GptBlock\"); "
               "none were given");
    for (const auto& m : model->modules(/*include_self=*/false)) {
      for (const auto& t : options.auto_wrap_module_types) {
        if (m->name() == t || m->name() == t + "Impl") picked.insert(m.get());
      }
    }
    if (picked.empty()) {
      std::ostringstream types;
      for (const auto& t : options.auto_wrap_module_types) types << " '" << t << "'";
      ZS_THROW(ConfigError, "sharding.auto_wrap_policy = MODULE_TYPE matched no module of type", types.str(),
               " (types are Module::name() values such as torch::nn::Linear or MyBlock)");
    }
  } else if (policy == AutoWrapPolicy::kSizeBased) {
    int64_t largest = 0;  // the most parameters a candidate held, for the error below
    std::function<int64_t(torch::nn::Module&, bool)> decide = [&](torch::nn::Module& m, bool is_root) {
      int64_t remaining = 0;
      for (const auto& p : m.named_parameters(/*recurse=*/false)) remaining += p.value().numel();
      for (const auto& c : m.children()) remaining += decide(*c, false);
      if (is_root || is_container(m)) return remaining;
      if (detail::is_declared_unit(&m)) return int64_t{0};
      largest = std::max(largest, remaining);
      if (remaining < options.auto_wrap_min_params) return remaining;
      picked.insert(&m);
      return int64_t{0};
    };
    decide(*model, true);
    ZS_REQUIRE(!picked.empty(), ConfigError, "sharding.auto_wrap_policy = SIZE_BASED picked no module: none holds "
               "sharding.auto_wrap_min_params = ", options.auto_wrap_min_params, " parameters outside the units "
               "below it (the most any holds is ", largest, "); lower auto_wrap_min_params, or declare the blocks "
               "as zeroshard::Unit and use auto_wrap_policy = NONE");
  }
  return picked;
}

namespace {

// A parameter tensor as the walk over the modules first met it: the unit that owns it (the root
// when several units share it), its first name and its other names, and where it sits.
struct SeenParam {
  detail::ShardedUnit* owner;
  std::string name;
  std::vector<std::string> aliases;
  at::Tensor param;
  const torch::nn::Module* module;  // where the first name was seen, and the parameter's key there
  std::string key;
};

}  // namespace

void detail::ShardingEngineImpl::discover_units() {
  auto make_unit = [&](torch::nn::Module* module, std::string name, bool is_root) {
    units.push_back(std::make_unique<detail::ShardedUnit>(host, std::move(name), static_cast<int>(units.size()),
                                                          module, is_root));
    return units.back().get();
  };
  root = make_unit(model.get(), "<root>", true);
  const std::unordered_set<const torch::nn::Module*> picked = auto_wrap_picks();
  auto wants_unit = [&](torch::nn::Module& child) {
    return detail::is_declared_unit(&child) || picked.count(&child) > 0;
  };
  std::unordered_map<const void*, size_t> index;  // tensor -> its entry in `seen`
  std::vector<SeenParam> seen;
  std::function<void(torch::nn::Module&, const std::string&, detail::ShardedUnit*)> visit =
      [&](torch::nn::Module& m, const std::string& prefix, detail::ShardedUnit* owner) {
        for (const auto& item : m.named_parameters(/*recurse=*/false)) {
          const void* key = item.value().unsafeGetTensorImpl();
          auto it = index.find(key);
          if (it == index.end()) {
            index.emplace(key, seen.size());
            seen.push_back({owner, prefix + item.key(), {}, item.value(), &m, item.key()});
          } else {
            SeenParam& s = seen[it->second];
            s.aliases.push_back(prefix + item.key());
            if (s.owner != owner) s.owner = root;  // shared between units: the root owns it
          }
        }
        for (const auto& child : m.named_children()) {
          torch::nn::Module& c = *child.value();
          const std::string path = prefix + child.key();
          detail::ShardedUnit* next = owner;
          if (wants_unit(c)) {
            ZS_REQUIRE(detail::find_managed_unit(&c) == nullptr, UsageError, "module '", path,
                       "' is already wrapped by another ShardingEngine; wrap a module once");
            next = make_unit(&c, path, false);
          }
          visit(c, path + ".", next);
        }
      };
  visit(*model, "", root);
  // One FlatParam for the trainable parameters of each unit, one for the frozen ones, one for the
  // frozen Linear weights stored in NF4.
  for (auto& u : units) {
    detail::UnitSlots slots;
    for (SeenParam& s : seen) {
      if (s.owner == u.get()) detail::sort_slot(slots, {s.name, s.aliases, s.param, {}}, *s.module, s.key, options);
    }
    if (adopt(u.get(), slots)) continue;
    u->flats = detail::make_unit_flats(u->name, std::move(slots), groups, mem.get(), options);
  }
}

bool detail::ShardingEngineImpl::adopt(detail::ShardedUnit* u, const detail::UnitSlots& slots) {
  if (init == nullptr) return false;
  const std::vector<std::unique_ptr<FlatParam>>* built = init->built_flats(u->module);
  if (built == nullptr) return false;
  const std::vector<const std::vector<ParamSlot>*> wanted = slots.lists();
  auto describe = [](const std::vector<ParamSlot>& slots) {
    std::ostringstream os;
    for (size_t i = 0; i < slots.size(); ++i) os << (i ? ", " : "") << slots[i].name;
    return os.str();
  };
  bool same = wanted.size() == built->size();
  for (size_t k = 0; same && k < wanted.size(); ++k) {
    const auto& slots_built = (*built)[k]->slots();
    same = slots_built.size() == wanted[k]->size();
    for (size_t i = 0; same && i < slots_built.size(); ++i) {
      same = slots_built[i].param.unsafeGetTensorImpl() == (*wanted[k])[i].param.unsafeGetTensorImpl();
    }
  }
  ZS_REQUIRE(same, UsageError, "unit '", u->name, "' was sharded at construction (ShardedInit) with parameters [",
             built->empty() ? std::string() : describe(built->front()->slots()),
             "] but in the finished model it owns [", wanted.empty() ? std::string() : describe(*wanted.front()),
             "]: a parameter shared with another unit (tied weights) must be created in their common parent, "
             "not inside a unit");
  std::vector<std::unique_ptr<FlatParam>> flats = init->take_unit(u->module);
  for (size_t k = 0; k < wanted.size(); ++k) {
    std::vector<std::pair<std::string, std::vector<std::string>>> names;
    for (const ParamSlot& s : *wanted[k]) names.emplace_back(s.name, s.aliases);
    flats[k]->rename(detail::flat_name(u->name, flats[k]->trainable(), flats[k]->codec()), names);
    u->flats.push_back(std::move(flats[k]));
  }
  u->adopted = true;
  return true;
}

void detail::ShardingEngineImpl::check_same_structure() {
  if (groups.comm->size() == 1) return;
  std::ostringstream os;
  for (auto& u : units) {
    os << "unit '" << u->name << "'\n";
    for (auto& f : u->flats) os << detail::describe_flat(*f);
  }
  detail::check_same_description(*session.world(), os.str(), "models");
}

void detail::ShardingEngineImpl::check_parameters() const {
  if (init != nullptr && init->units_not_taken() > 0) {
    ZS_THROW(UsageError, init->units_not_taken(), " unit(s) sharded at construction by this ShardedInit are not part "
             "of the model given to the engine; build the model's units while the ShardedInit is alive and wrap "
             "that model");
  }
  for (const auto& u : units) {
    if (u->adopted) continue;  // checked when they were sharded
    for (const auto& f : u->flats) f->check_params();
  }
}

void detail::ShardingEngineImpl::init_flat_params() {
  Communicator* sync = options.sync_module_states ? groups.comm.get() : nullptr;
  stores.start_params(units, init, mem.get());
  // Offloaded shards go to the store as each unit is built, so building never holds them all.
  for (auto& u : units) {
    for (auto& f : u->flats) {
      if (!u->adopted) f->init_from_params(sync);  // resharded: forward gathers it (adopted: done)
    }
    stores.store_unit(*u);
  }
  stores.log_params();
  stores.start_grads(units, mem.get());
  c10::AutoGradMode no_grad(false);
  std::vector<at::Tensor> buffers = model->buffers();
  for (auto& b : buffers) {
    if (b.is_floating_point() && b.scalar_type() != options.buffer_dtype) b.set_data(b.to(options.buffer_dtype));
  }
  if (sync != nullptr) detail::broadcast_buffers(*sync, buffers, 0, "zs.sync_buffers");
}

void detail::ShardingEngineImpl::sync_buffers_before_forward() {
  if (options.buffer_sync == BufferSync::kBroadcast) {
    detail::broadcast_buffers(*groups.comm, model->buffers(), 0, "zs.buffers");
  }
}

void detail::ShardingEngineImpl::optimizer_step(ShardingEngine& engine, ShardedOptimizer& optimizer) {
  if (stores.params() == nullptr && stores.grads() == nullptr) {
    optimizer.step(engine.param_shards());
    return;
  }
  // Offloaded parameters or gradients: the optimizer brings each shard in through the pager
  // while it updates it, so at most a shard or two is resident.
  std::vector<ParamShard> shards = engine.param_shards();
  std::vector<FlatParam*> flats;
  for (auto& u : units) {
    for (auto& f : u->flats) {
      if (f->trainable()) flats.push_back(f.get());
    }
  }
  detail::FlatParamPager pager(flats, shards, stores.params());
  try {
    optimizer.step(shards, pager);
  } catch (...) {
    detail::OffloadStores::release_all_noexcept(units);
    throw;
  }
  detail::OffloadStores::release_all(units);
}

// A CPU run allocates buffers of its largest unit's size every step (gathered parameters,
// unsharded gradients, offloaded shards read in), and glibc hands out fresh pages for each
// (host_memory.h): a cache smaller than such a block keeps none of them, and every step pays the
// page faults. Raised, never lowered; left alone when the config sized it or turned it off.
void detail::ShardingEngineImpl::grow_host_cache() {
  const MemoryOptions& m = session.options().memory;
  if (!session.device().is_cpu() || !m.host_cache_grows || !host_memory_tracking_installed() ||
      host_memory_stats().cache_limit <= 0) {
    return;
  }
  int64_t largest = 0;
  std::string name;
  for (const auto& u : units) {
    int64_t bytes = 0;
    for (const auto& f : u->flats) bytes += f->padded_numel() * 4;
    if (bytes > largest) {
      largest = bytes;
      name = u->name;
    }
  }
  const int64_t want = 4 * largest;
  if (want <= host_memory_stats().cache_limit) return;
  set_host_memory_cache_limit(want, detail::concat("4 x the fp32 bytes of unit '", name,
                                                   "' (the engine's largest; memory.host_cache_mib sets the size)"));
  ZS_LOG(kInfo) << "host memory cache raised to " << format_bytes(want) << ": 4 x the " << format_bytes(largest)
                << " of unit '" << name << "', whose buffers a step allocates again (memory.host_cache_mib sets it)";
}

// Units that stay gathered between steps (NO_SHARD) hold a param_dtype copy of their shard, unless
// they alias it: drop it so the next forward casts the updated values again (after a failed step
// too: the shards may be partly updated or rolled back). Replaced values (mark_values_replaced)
// are the optimizer's once a step succeeded.
void detail::ShardingEngineImpl::after_optimizer_step(bool succeeded) {
  for (auto& u : units) {
    for (auto& f : u->flats) {
      if (f->gathered() && !f->aliased()) f->free_full();
      if (succeeded) f->clear_values_replaced();
    }
  }
}

void detail::ShardingEngineImpl::agree_on_step(const std::exception_ptr& failure) {
  Communicator& world = *session.world();
  if (world.size() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const detail::StepOutcome outcome = detail::run_step(world, true, "zs.step", [&] {
    if (failure) std::rethrow_exception(failure);
  });
  if (!outcome.any_failed()) {
    step_awaiting_peers = false;
    return;
  }
  const std::string first = detail::first_error(world, outcome, "zs.step.error");
  if (failure) {
    step_awaiting_peers = false;
    std::rethrow_exception(failure);  // this rank's own error, of its own kind
  }
  step_awaiting_peers = true;
  ZS_THROW(IoError, "the optimizer step failed on rank(s) ", outcome.failed_ranks(), "; ", first,
           ". This rank's step succeeded and is kept: once the cause is fixed, engine.step(optimizer) again on every "
           "rank completes it where it failed (this rank only waits for it)");
}

void detail::ShardingEngineImpl::sync_buffers_after_step() {
  if (options.buffer_sync == BufferSync::kAverage) detail::average_buffers(*groups.comm, model->buffers(), "zs.buffers");
}

// ---------------------------------------------------------------------------------------------

ShardingEngine::ShardingEngine(Session& session, std::shared_ptr<torch::nn::Module> model, ShardingOptions options)
    : ShardingEngine(std::make_unique<detail::ShardingEngineImpl>(session, std::move(model), std::move(options), nullptr)) {}

ShardingEngine::ShardingEngine(ShardedInit& init, std::shared_ptr<torch::nn::Module> model)
    : ShardingEngine(std::make_unique<detail::ShardingEngineImpl>(init.impl_->session(), std::move(model),
                                                             init.impl_->options(), init.impl_.get())) {}

ShardingEngine::ShardingEngine(std::unique_ptr<detail::ShardingEngineImpl> impl) : impl_(std::move(impl)) {
  // The memory summary and out-of-memory reports (zeroshard/core/memory_report.h) show these
  // categories; the callback only reads atomics.
  std::weak_ptr<MemoryStats> weak = impl_->mem;
  memory_source_ = add_memory_source("Engine model state", [weak] {
    std::vector<MemoryRow> rows;
    auto mem = weak.lock();
    if (!mem) return rows;
    for (int i = 0; i < static_cast<int>(MemCategory::kCount); ++i) {
      const auto c = static_cast<MemCategory>(i);
      MemoryRow r;
      r.name = to_string(c);
      r.current = mem->current(c);
      r.peak = mem->peak(c);
      r.in_device_allocator = c != MemCategory::kOffloadHost && c != MemCategory::kPinnedHost && c != MemCategory::kNvme;
      r.on_disk = c == MemCategory::kNvme;
      rows.push_back(std::move(r));
    }
    return rows;
  });
  int64_t encoded = 0;
  std::string codecs;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (f->codec() == nullptr) continue;
      for (const ParamSlot& s : f->slots()) encoded += s.numel;
      if (codecs.find(f->codec()->name()) == std::string::npos) codecs += (codecs.empty() ? "" : ", ") + std::string(f->codec()->name());
    }
  }
  impl_->grow_host_cache();
  ZS_LOG(kInfo) << "sharding " << impl_->units.size() << " unit(s), " << num_params() << " parameters ("
                << num_trainable_params() << " trainable"
                << (encoded > 0 ? detail::concat(", ", encoded, " frozen ones encoded as ", codecs) : std::string())
                << ") over a shard group of " << shard_group_size() << " rank(s)";
}

ShardingEngine::~ShardingEngine() {
  remove_memory_source(memory_source_);
  for (auto& u : impl_->units) detail::unregister_managed_unit(u->module);
}

double ShardingEngine::clip_grad_norm(double max_norm) { return clip_grad_norm_tensor(max_norm).item<double>(); }

at::Tensor ShardingEngine::clip_grad_norm_tensor(double max_norm) {
  ZS_REQUIRE(max_norm > 0, UsageError, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  impl_->require_finished_backward("clip_grad_norm()");
  std::vector<FlatParam*> with_grad;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (f->trainable() && f->grad_shard().defined()) with_grad.push_back(f.get());
    }
  }
  c10::AutoGradMode no_grad(false);
  // The shards' squared norms are summed in double where the shard group's collectives run (the
  // CPU for MPI, the device with streams), all-reduced there, and never read by the host here.
  const at::Device where = impl_->streams->enabled() ? impl_->streams->device() : at::Device(at::kCPU);
  at::Tensor total = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(where));
  auto add_squares = [&] {
    // A stored gradient's squared norm was taken as it was written (the same kernel on the same
    // values): it is not read back unless a factor was recorded for it since.
    auto next_to_read = [&](size_t from) {
      while (from < with_grad.size() && with_grad[from]->known_grad_squared_norm() != nullptr) ++from;
      return from;
    };
    for (size_t k = 0; k < with_grad.size(); ++k) {
      if (const at::Tensor* known = with_grad[k]->known_grad_squared_norm()) {
        total.add_(*known);
        continue;
      }
      // Offloaded gradients come in one at a time (the next read ahead) and leave unchanged.
      const at::Tensor& g = with_grad[k]->grad_for_read();
      const size_t next = next_to_read(k + 1);
      if (next < with_grad.size()) with_grad[next]->prefetch_grad();
      total.add_(g.norm().to(at::kDouble).square());
      with_grad[k]->release_grad();
    }
  };
  // A gradient read failing on one rank fails clipping on every rank, before the all-reduce the
  // others would wait in.
  if (impl_->stores.grads() != nullptr) {
    detail::io_on_every_rank(*impl_->session.world(), "reading the gradient shards for clip_grad_norm",
                             "zs.clip.read", add_squares);
  } else {
    add_squares();
  }
  if (impl_->groups.shard_group->size() > 1) impl_->groups.shard_group->all_reduce(total, ReduceOp::kSum, "zs.clip")->wait();
  at::Tensor norm = total.sqrt_();
  if (std::isfinite(max_norm)) {
    // min(1, max_norm / (norm + 1e-6)) on the device; a NaN norm leaves the gradients as they are
    // (the step is skipped), an infinite one zeroes them, as torch::nn::utils::clip_grad_norm_.
    // An offloaded gradient takes the factor at its next load: nothing is written.
    const at::Tensor coef = at::nan_to_num(at::full_like(norm, max_norm).div_(norm + 1e-6).clamp_max_(1.0), 1.0);
    // A step running during backward reads the gradients: it finishes first, and step() keeps it
    // only if this factor is 1.
    if (impl_->overlap.armed()) {
      impl_->settle_overlap();
      impl_->check_overlap_grads(/*after_known_scale=*/false);
      impl_->overlap.factors.push_back(coef);
    }
    for (FlatParam* f : with_grad) f->scale_grad(coef);
    impl_->check_overlap_grads(/*after_known_scale=*/true);
  }
  return norm;
}

std::vector<ParamShard> ShardingEngine::param_shards() { return impl_->shard_list(); }

void ShardingEngine::set_param_groups(const ParamGroupOptions& options) {
  // The weights of Embedding / EmbeddingBag modules, by qualified name.
  std::unordered_set<std::string> embeddings;
  for (const auto& item : impl_->model->named_modules()) {
    const std::string& type = item.value()->name();
    if (type != "torch::nn::EmbeddingImpl" && type != "torch::nn::EmbeddingBagImpl") continue;
    embeddings.insert(item.key().empty() ? "weight" : item.key() + ".weight");
  }
  std::vector<ParamGroupParam> params;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (!f->trainable()) continue;
      for (const ParamSlot& slot : f->slots()) {
        ParamGroupParam p{slot.name, slot.aliases, static_cast<int64_t>(slot.shape.size()), slot.numel,
                          embeddings.count(slot.name) > 0};
        for (const std::string& a : slot.aliases) p.embedding = p.embedding || embeddings.count(a) > 0;
        params.push_back(std::move(p));
      }
    }
  }
  std::vector<ParamGroupAssignment> groups = assign_param_groups(options, params);
  // Each slot's part of this rank's shard [lo, lo + S) of the flat layout, as shard offsets.
  std::vector<std::vector<ShardGroupRange>> ranges;
  size_t k = 0;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (!f->trainable()) continue;
      const int64_t lo = static_cast<int64_t>(f->shard_group().rank()) * f->shard_numel();
      const int64_t hi = lo + f->shard_numel();
      std::vector<ShardGroupRange> mine;
      for (const ParamSlot& slot : f->slots()) {
        const ParamGroupAssignment& g = groups[k++];
        const int64_t b = std::max(slot.offset, lo), e = std::min(slot.offset + slot.numel, hi);
        if (b < e) mine.push_back({b - lo, e - lo, g.weight_decay, g.lr_scale});
      }
      std::sort(mine.begin(), mine.end(),
                [](const ShardGroupRange& x, const ShardGroupRange& y) { return x.begin < y.begin; });
      ranges.push_back(std::move(mine));
    }
  }
  impl_->param_groups = std::move(groups);
  impl_->shard_group_ranges = std::move(ranges);
}

GradientShards& ShardingEngine::gradients() {
  impl_->gradients.flats.clear();
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (f->trainable() && f->grad_shard().defined() && f->grad_shard().numel() > 0) {
        impl_->gradients.flats.push_back(f.get());
      }
    }
  }
  return impl_->gradients;
}

const std::vector<ParamGroupAssignment>& ShardingEngine::param_groups() const { return impl_->param_groups; }

std::vector<FlatShard*> ShardingEngine::flat_shards() {
  std::vector<FlatShard*> out;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) out.push_back(f.get());
  }
  return out;
}

std::vector<FlatParam*> detail::flat_params(ShardingEngine& engine) {
  std::vector<FlatParam*> out;
  for (FlatShard* s : engine.flat_shards()) out.push_back(static_cast<FlatParam*>(s));
  return out;
}

int ShardingEngine::replica_rank() const {
  return impl_->groups.replicate_group ? impl_->groups.replicate_group->rank() : 0;
}

int ShardingEngine::shard_rank() const { return impl_->groups.shard_group->rank(); }

const ShardingOptions& ShardingEngine::options() const { return impl_->options; }
Session& ShardingEngine::session() { return impl_->session; }
torch::nn::Module& ShardingEngine::model() { return *impl_->model; }

void ShardingEngine::step(ShardedOptimizer& optimizer) {
  impl_->require_finished_backward("step()");
  impl_->drop_secondaries();  // hpZ: slices of the values this step replaces
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      ZS_REQUIRE(!f->has_grad_buffer() && !f->reduce_pending(), UsageError, "step() with gradients of unit '",
                 f->name(), "' not yet reduced: the last micro-batch's backward must run outside no_sync()");
    }
  }
  c10::AutoGradMode no_grad(false);
  static const int kStepPhase = memory_phase_id("optimizer step");
  MemoryPhase phase(kStepPhase);
  ZS_REQUIRE(!optimizer.expects_offloaded_params() || impl_->stores.params() != nullptr, UsageError,
             "optimizer ", optimizer.describe(), " was made for offloaded parameter shards (OffloadOptions.params = CPU "
             "or NVME), but this engine keeps them on the device (ShardingOptions.offload_params.target = DEVICE): "
             "build both from the same RunOptions (resolve(), run.sharding and run.offload)");
  // A step that fails on one rank fails on every rank (one all-reduce of who failed), so no rank
  // goes on to the buffer sync or the next forward's collectives alone. A rank whose own step
  // succeeded keeps it, and a retry there only joins the agreement while the failed rank
  // completes its step.
  std::exception_ptr failure;
  if (!impl_->step_awaiting_peers) {
    try {
      if (impl_->overlap.armed()) {
        impl_->overlapped_step(*this, optimizer);
      } else {
        impl_->optimizer_step(*this, optimizer);
      }
    } catch (...) {
      failure = std::current_exception();
    }
    impl_->after_optimizer_step(failure == nullptr);
  }
  impl_->agree_on_step(failure);
  const ShardedOptimizer::Placement where = optimizer.placement();
  int64_t store_host = 0, store_disk = 0;
  for (const ShardStore* store : {impl_->stores.params(), impl_->stores.grads()}) {
    if (store == nullptr) continue;
    store_host += store->bytes_in_host();
    store_disk += store->bytes_on_disk();
  }
  impl_->mem->set(MemCategory::kOptimizerState, where.device);
  impl_->mem->set(MemCategory::kOffloadHost, where.host + store_host);
  impl_->mem->set(MemCategory::kNvme, where.nvme + store_disk);
  impl_->sync_buffers_after_step();
}

void ShardingEngine::zero_grad() {
  impl_->abandon_overlap();
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) f->drop_grad_shard();
  }
}

std::map<std::string, at::Tensor> ShardingEngine::full_state_dict(const StateDictOptions& o) {
  std::map<std::string, at::Tensor> out;
  const bool keep = !o.rank0_only || impl_->session.rank() == 0;
  // A copy that owns its memory (a view would keep the whole gathered flat alive), on the CPU
  // when asked.
  auto own = [&](const at::Tensor& t) {
    return o.offload_to_cpu ? t.to(t.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true) : t.clone();
  };
  c10::AutoGradMode no_grad(false);
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      at::Tensor flat = f->gather_values("zs.state_dict");  // collective: every rank gathers
      f->release_shard();  // offloaded: back to the store (unchanged)
      if (!keep) continue;
      if (o.offload_to_cpu) flat = flat.to(at::kCPU);  // one copy of the unit, sliced below
      for (const ParamSlot& s : f->slots()) {
        at::Tensor v = flat.narrow(0, s.offset, s.numel).view(s.shape).clone();
        out[s.name] = v;
        for (const auto& a : s.aliases) out[a] = v;
      }
    }
  }
  if (!keep) return out;
  for (const auto& b : impl_->model->named_buffers()) out[b.key()] = own(b.value());
  return out;
}

const MemoryStats& ShardingEngine::memory() const { return *impl_->mem; }
MemoryStats& ShardingEngine::memory() { return *impl_->mem; }
const ShardStore* ShardingEngine::param_store() const { return impl_->stores.params(); }
const ShardStore* ShardingEngine::grad_store() const { return impl_->stores.grads(); }

std::string ShardingEngine::memory_report() const {
  return impl_->mem->report(detail::concat("zeroshard memory, rank ", impl_->session.rank(), " (shard group of ",
                                          impl_->groups.shard_group->size(), ")"));
}

const CommCounters& ShardingEngine::comm_counters() const { return impl_->counters; }
void ShardingEngine::reset_comm_counters() { impl_->counters = CommCounters{}; }

std::vector<std::string> ShardingEngine::unit_names() const {
  std::vector<std::string> names;
  for (auto& u : impl_->units) names.push_back(u->name);
  return names;
}

int64_t ShardingEngine::num_params() const {
  int64_t n = 0;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      for (const ParamSlot& s : f->slots()) n += s.numel;  // not f->numel(): NF4 flats leave gaps
    }
  }
  return n;
}

int64_t ShardingEngine::num_trainable_params() const {
  int64_t n = 0;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) n += f->trainable() ? f->numel() : 0;
  }
  return n;
}

int64_t ShardingEngine::num_padded_trainable_params() const {
  int64_t n = 0;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) n += f->trainable() ? f->padded_numel() : 0;
  }
  return n;
}

int ShardingEngine::shard_group_size() const { return impl_->groups.shard_group->size(); }
c10::ScalarType ShardingEngine::output_dtype() const { return impl_->options.output_dtype; }
c10::ScalarType ShardingEngine::compute_dtype() const { return impl_->options.param_dtype; }

ShardingEngine::NoSync::NoSync(ShardingEngine& e) : engine_(e) { ++engine_.impl_->no_sync_depth; }
ShardingEngine::NoSync::~NoSync() { --engine_.impl_->no_sync_depth; }

}  // namespace zeroshard
