// ShardingEngine: construction (groups, units, structure check, flat parameters) and the
// optimizer side (clipping, step, zero_grad, state). The forward/backward lifecycle is in
// engine_hooks.cpp.
#include "engine_internal.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <unordered_map>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include "zeroshard/core/error.h"
#include "zeroshard/core/logging.h"

namespace zeroshard {

namespace detail {
void register_managed_unit(const torch::nn::Module* module, UnitState* unit);
void unregister_managed_unit(const torch::nn::Module* module);
}  // namespace detail

ShardingOptions ShardingOptions::from_config(const config::ShardingConfig& cfg) {
  ShardingOptions o;
  o.strategy = cfg.strategy();
  o.hybrid_group_size = cfg.hybrid_group_size();
  o.forward_prefetch = cfg.forward_prefetch();
  o.backward_prefetch = cfg.backward_prefetch();
  o.limit_all_gathers = cfg.limit_all_gathers();
  o.sync_module_states = cfg.sync_module_states();
  o.auto_wrap_policy = cfg.auto_wrap_policy();
  o.auto_wrap_min_params = cfg.auto_wrap_min_params();
  return o;
}

ShardingEngine::Impl::Impl(Session& s, std::shared_ptr<torch::nn::Module> m, ShardingOptions o)
    : session(s), model(std::move(m)), options(std::move(o)) {
  ZS_REQUIRE(model != nullptr, UsageError, "ShardingEngine needs a model, got a null module");
  ZS_REQUIRE(detail::find_managed_unit(model.get()) == nullptr, UsageError,
             "this model is already wrapped by another ShardingEngine; wrap a module once");
  setup_groups();
  discover_units();
  check_same_structure();
  check_parameters();  // before any flat parameter is built: a refused wrap changes nothing
  init_flat_params();
  install_grad_hooks();
  for (auto& u : units) detail::register_managed_unit(u->module, u.get());
}

void ShardingEngine::Impl::setup_groups() {
  const bool on_cuda = !model->parameters().empty() && model->parameters().front().is_cuda();
  comm = on_cuda ? session.device_world() : session.world();
  const int n = comm->size(), r = comm->rank();
  using S = config::ShardingConfig;
  if (n == 1) {
    shard_group = comm;
    return;
  }
  switch (options.strategy) {
    case S::FULL_SHARD:
    case S::SHARD_GRAD_OP:
      shard_group = comm;
      break;
    case S::NO_SHARD:
      shard_group = comm->split(r, 0);
      replicate_group = comm;
      break;
    case S::HYBRID_SHARD: {
      const int g = options.hybrid_group_size > 0 ? options.hybrid_group_size : session.local_world_size();
      ZS_REQUIRE(n % g == 0, ConfigError, "sharding.hybrid_group_size = ", g, " does not divide the world size ", n,
                 "; allowed: a divisor of ", n, " (0 means the ranks of one node, here ", session.local_world_size(),
                 ")");
      shard_group = comm->split(r / g, r);
      replicate_group = comm->split(r % g, r);
      break;
    }
    default:
      ZS_THROW(ConfigError, "sharding.strategy has an unknown value ", static_cast<int>(options.strategy));
  }
}

namespace {

int64_t count_params(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

bool is_container(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&m) != nullptr;
}

}  // namespace

void ShardingEngine::Impl::discover_units() {
  auto make_unit = [&](torch::nn::Module* module, std::string name, bool is_root) {
    auto u = std::make_unique<detail::UnitState>();
    u->name = std::move(name);
    u->module = module;
    u->is_root = is_root;
    u->engine = this;
    units.push_back(std::move(u));
    return units.back().get();
  };
  root = make_unit(model.get(), "<root>", true);
  ZS_REQUIRE(options.auto_wrap_policy != config::AutoWrap::MODULE_TYPE || !options.auto_wrap_module_types.empty(),
             ConfigError, "sharding.auto_wrap_policy = MODULE_TYPE needs the module types to wrap "
             "(ShardingOptions::auto_wrap_module_types, e.g. {\"torch::nn::Linear\"}); none were given");
  auto wants_unit = [&](torch::nn::Module& parent, torch::nn::Module& child) {
    if (detail::is_declared_unit(&child)) return true;
    switch (options.auto_wrap_policy) {
      case config::AutoWrap::SIZE_BASED:
        return is_container(parent) && count_params(child) >= options.auto_wrap_min_params;
      case config::AutoWrap::MODULE_TYPE:
        for (const auto& t : options.auto_wrap_module_types) {
          if (child.name() == t || child.name() == t + "Impl") return true;
        }
        return false;
      default:
        return false;
    }
  };
  // Owner of each parameter tensor (first name seen) and the slots per unit.
  struct Seen {
    detail::UnitState* owner;
    std::string name;
    std::vector<std::string> aliases;
    at::Tensor param;
  };
  std::unordered_map<const void*, size_t> index;
  std::vector<Seen> seen;
  std::function<void(torch::nn::Module&, const std::string&, detail::UnitState*)> visit =
      [&](torch::nn::Module& m, const std::string& prefix, detail::UnitState* owner) {
        for (const auto& item : m.named_parameters(/*recurse=*/false)) {
          const void* key = item.value().unsafeGetTensorImpl();
          auto it = index.find(key);
          if (it == index.end()) {
            index.emplace(key, seen.size());
            seen.push_back({owner, prefix + item.key(), {}, item.value()});
          } else {
            Seen& s = seen[it->second];
            s.aliases.push_back(prefix + item.key());
            if (s.owner != owner) s.owner = root;  // shared between units: the root owns it
          }
        }
        for (const auto& child : m.named_children()) {
          torch::nn::Module& c = *child.value();
          const std::string path = prefix + child.key();
          detail::UnitState* next = owner;
          if (wants_unit(m, c)) {
            ZS_REQUIRE(detail::find_managed_unit(&c) == nullptr, UsageError, "module '", path,
                       "' is already wrapped by another ShardingEngine; wrap a module once");
            next = make_unit(&c, path, false);
          }
          visit(c, path + ".", next);
        }
      };
  visit(*model, "", root);
  if (options.auto_wrap_policy == config::AutoWrap::MODULE_TYPE && units.size() == 1) {
    std::ostringstream types;
    for (const auto& t : options.auto_wrap_module_types) types << " '" << t << "'";
    ZS_THROW(ConfigError, "sharding.auto_wrap_policy = MODULE_TYPE matched no module of type", types.str(),
             " (types are Module::name() values such as torch::nn::Linear or MyBlock)");
  }
  // One FlatParam for the trainable parameters of each unit, one for the frozen ones.
  for (auto& u : units) {
    std::vector<ParamSlot> trainable, frozen;
    for (Seen& s : seen) {
      if (s.owner != u.get()) continue;
      ParamSlot slot;
      slot.name = s.name;
      slot.aliases = s.aliases;
      slot.param = s.param;
      (s.param.requires_grad() ? trainable : frozen).push_back(std::move(slot));
    }
    if (!trainable.empty()) {
      u->flats.push_back(std::make_unique<FlatParam>(u->name, std::move(trainable), true, shard_group,
                                                     replicate_group, &mem));
    }
    if (!frozen.empty()) {
      u->flats.push_back(std::make_unique<FlatParam>(u->name + " (frozen)", std::move(frozen), false, shard_group,
                                                     replicate_group, &mem));
    }
  }
}

void ShardingEngine::Impl::check_same_structure() {
  if (comm->size() == 1) return;
  std::ostringstream os;
  for (auto& u : units) {
    os << "unit '" << u->name << "'\n";
    for (auto& f : u->flats) {
      for (const ParamSlot& s : f->slots()) {
        os << "  parameter '" << s.name << "' shape " << at::IntArrayRef(s.shape) << " "
           << c10::toString(s.param.scalar_type()) << " " << s.param.device().type()
           << (f->trainable() ? "" : " frozen") << "\n";
      }
    }
  }
  const std::string mine = os.str();
  const int n = comm->size();
  at::Tensor hashes = at::empty({n}, at::kLong);
  at::Tensor my_hash = at::full({1}, static_cast<int64_t>(std::hash<std::string>{}(mine) >> 1), at::kLong);
  session.world()->all_gather_into(hashes, my_hash, "zs.structure_hash")->wait();
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    if (hashes[r].item<int64_t>() != hashes[0].item<int64_t>()) differ.push_back(r);
  }
  if (differ.empty()) return;
  // Name the first difference: rank 0 sends its description to everyone.
  at::Tensor len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  session.world()->broadcast(len, 0, "zs.structure_len")->wait();
  at::Tensor text = at::empty({len.item<int64_t>()}, at::kByte);
  if (comm->rank() == 0) std::memcpy(text.data_ptr(), mine.data(), mine.size());
  session.world()->broadcast(text, 0, "zs.structure_text")->wait();
  std::string theirs(static_cast<const char*>(text.data_ptr()), text.numel());
  std::istringstream a(theirs), b(mine);
  std::string la, lb, unit_a;
  std::ostringstream ranks;
  for (size_t i = 0; i < differ.size(); ++i) ranks << (i ? ", " : "") << differ[i];
  while (true) {
    bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (ga && la.rfind("unit", 0) == 0) unit_a = la;
    if (!ga || !gb || la != lb) {
      ZS_THROW(UsageError, "ranks build different models (ranks differing from rank 0: ", ranks.str(),
               "). First difference on this rank, in ", unit_a.empty() ? std::string("the unit list") : unit_a,
               ": rank 0 has '", ga ? la : std::string("<nothing>"), "' but this rank has '",
               gb ? lb : std::string("<nothing>"), "'. Build the same model on every rank (same config, no "
               "rank-dependent modules) before wrapping it.");
    }
  }
  ZS_THROW(UsageError, "ranks build different models: ranks ", ranks.str(),
           " differ from rank 0 (their error messages name the first difference)");
}

void ShardingEngine::Impl::check_parameters() const {
  for (const auto& u : units) {
    for (const auto& f : u->flats) f->check_params();
  }
}

void ShardingEngine::Impl::init_flat_params() {
  Communicator* sync = options.sync_module_states ? comm.get() : nullptr;
  for (auto& u : units) {
    for (auto& f : u->flats) {
      f->init_from_params(sync);
      f->free_full();  // every unit starts resharded; forward gathers it
    }
  }
  if (sync != nullptr && sync->size() > 1) {
    c10::AutoGradMode no_grad(false);
    for (auto& b : model->buffers()) {
      if (b.numel() > 0) sync->broadcast(b, 0, "zs.sync_buffer")->wait();
    }
  }
}

// ---------------------------------------------------------------------------------------------

ShardingEngine::ShardingEngine(Session& session, std::shared_ptr<torch::nn::Module> model, ShardingOptions options)
    : impl_(std::make_unique<Impl>(session, std::move(model), std::move(options))) {
  ZS_LOG(kInfo) << "sharding " << impl_->units.size() << " unit(s), " << num_params() << " parameters ("
                << num_trainable_params() << " trainable) over a shard group of " << shard_group_size()
                << " rank(s)";
}

ShardingEngine::~ShardingEngine() {
  for (auto& u : impl_->units) detail::unregister_managed_unit(u->module);
}

double ShardingEngine::clip_grad_norm(double max_norm) {
  ZS_REQUIRE(max_norm > 0, UsageError, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  double sumsq = 0;
  std::vector<at::Tensor> grads;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (f->trainable() && f->grad_shard().defined()) {
        const double n = f->grad_shard().norm().item<double>();
        sumsq += n * n;
        grads.push_back(f->grad_shard());
      }
    }
  }
  at::Tensor total = at::full({1}, sumsq, at::kDouble);
  if (impl_->shard_group->size() > 1) impl_->shard_group->all_reduce(total, ReduceOp::kSum, "zs.clip")->wait();
  const double norm = std::sqrt(total.item<double>());
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    c10::AutoGradMode no_grad(false);
    for (auto& g : grads) g.mul_(static_cast<float>(coef));
  }
  return norm;
}

std::vector<ParamShard> ShardingEngine::param_shards() {
  std::vector<ParamShard> out;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      if (f->trainable()) out.push_back({f->shard(), f->grad_shard(), f->name()});
    }
  }
  return out;
}

void ShardingEngine::step(ShardedOptimizer& optimizer) {
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      ZS_REQUIRE(!f->has_grad_buffer() && !f->reduce_pending(), UsageError, "step() with gradients of unit '",
                 f->name(), "' not yet reduced: the last micro-batch's backward must run outside no_sync()");
    }
  }
  c10::AutoGradMode no_grad(false);
  optimizer.step(param_shards());
  impl_->mem.set(MemCategory::kOptimizerState, optimizer.state_bytes());
  // Buffers (e.g. BatchNorm running statistics) are averaged so every rank holds the same values.
  if (impl_->comm->size() > 1) {
    for (auto& b : impl_->model->buffers()) {
      if (b.numel() > 0 && c10::isFloatingType(b.scalar_type())) {
        impl_->comm->all_reduce(b, ReduceOp::kAvg, "zs.buffers")->wait();
      }
    }
  }
}

void ShardingEngine::zero_grad() {
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) f->drop_grad_shard();
  }
}

std::map<std::string, at::Tensor> ShardingEngine::full_state_dict() {
  std::map<std::string, at::Tensor> out;
  for (auto& u : impl_->units) {
    for (auto& f : u->flats) {
      at::Tensor flat = f->gather_values("zs.state_dict");
      for (const ParamSlot& s : f->slots()) {
        at::Tensor v = flat.narrow(0, s.offset, s.numel).view(s.shape).clone();
        out[s.name] = v;
        for (const auto& a : s.aliases) out[a] = v;
      }
    }
  }
  for (const auto& b : impl_->model->named_buffers()) out[b.key()] = b.value().clone();
  return out;
}

const MemoryStats& ShardingEngine::memory() const { return impl_->mem; }
MemoryStats& ShardingEngine::memory() { return impl_->mem; }

std::string ShardingEngine::memory_report() const {
  return impl_->mem.report(detail::concat("zeroshard memory, rank ", impl_->session.rank(), " (shard group of ",
                                          impl_->shard_group->size(), ")"));
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
    for (auto& f : u->flats) n += f->numel();
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

int ShardingEngine::shard_group_size() const { return impl_->shard_group->size(); }

ShardingEngine::NoSync::NoSync(ShardingEngine& e) : engine_(e) { ++engine_.impl_->no_sync_depth; }
ShardingEngine::NoSync::~NoSync() { --engine_.impl_->no_sync_depth; }

}  // namespace zeroshard
