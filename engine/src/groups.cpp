// SPDX-License-Identifier: Apache-2.0
#include "groups.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/engine/plan.h"

namespace zeroshard::detail {

namespace {

// This rank's node, as a number every rank agrees on: the lowest world rank on it.
int64_t node_id(Session& session) {
  at::Tensor t = at::full({1}, static_cast<int64_t>(session.rank()), at::kLong);
  if (session.node()->size() > 1) session.node()->all_reduce(t, ReduceOp::kMin, "zs.node_id")->wait();
  return t.item<int64_t>();
}

// "2 on ranks 0, 2; 1 on rank 1"
std::string values_by_rank(const std::vector<int64_t>& values, const std::function<std::string(int64_t)>& show) {
  std::map<int64_t, std::vector<int>> ranks;
  for (size_t r = 0; r < values.size(); ++r) ranks[values[r]].push_back(static_cast<int>(r));
  std::ostringstream os;
  bool first = true;
  for (const auto& [v, list] : ranks) {
    os << (first ? "" : "; ") << show(v) << " on rank" << (list.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < list.size(); ++i) os << (i ? ", " : "") << list[i];
    first = false;
  }
  return os.str();
}

}  // namespace

namespace {

// One all-gather of every rank's strategy, hybrid group size and node, so that every rank builds
// the same plan from the same facts, or every rank fails alike (a split that some ranks skip
// would hang the others). Returns the nodes, by rank.
std::vector<int> agree_on_plan(Session& session, const ShardingOptions& options) {
  const int n = session.world()->size();
  constexpr int kFacts = 4;
  at::Tensor mine = at::empty({kFacts}, at::kLong);
  mine[0] = static_cast<int64_t>(options.strategy);
  mine[1] = options.hybrid_group_size;
  mine[2] = node_id(session);
  mine[3] = options.hpz_group_size;
  at::Tensor all = at::empty({kFacts * n}, at::kLong);
  session.world()->all_gather_into(all, mine, "zs.sharding_plan")->wait();
  std::vector<int64_t> strategies(n), sizes(n), hpz(n);
  std::vector<int> nodes(n);
  const int64_t* v = all.data_ptr<int64_t>();
  for (int k = 0; k < n; ++k) {
    strategies[k] = v[kFacts * k];
    sizes[k] = v[kFacts * k + 1];
    nodes[k] = static_cast<int>(v[kFacts * k + 2]);
    hpz[k] = v[kFacts * k + 3];
  }
  auto differ = [](const std::vector<int64_t>& x) {
    return std::adjacent_find(x.begin(), x.end(), std::not_equal_to<>()) != x.end();
  };
  ZS_REQUIRE(!differ(strategies), ConfigError, "ranks disagree on sharding.strategy: ",
             values_by_rank(strategies, [](int64_t s) { return std::string(to_string(static_cast<ShardingStrategy>(s))); }),
             "; every rank must wrap its model with the same sharding options (the same config)");
  const bool hybrid = options.strategy == ShardingStrategy::kHybridShard;
  ZS_REQUIRE(!hybrid || !differ(sizes), ConfigError, "ranks disagree on sharding.hybrid_group_size: ",
             values_by_rank(sizes, [](int64_t s) { return std::to_string(s); }),
             "; every rank must wrap its model with the same sharding options (the same config)");
  ZS_REQUIRE(!differ(hpz), ConfigError, "ranks disagree on sharding.hpz_group_size: ",
             values_by_rank(hpz, [](int64_t s) { return std::to_string(s); }),
             "; every rank must wrap its model with the same sharding options (the same config)");
  return nodes;
}

// The plan's shard and replica groups of `comm` (collective splits: every rank computes the same
// plan, so every rank makes the same splits).
std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> split_groups(
    const std::shared_ptr<Communicator>& comm, const ShardingPlan& plan) {
  const int n = comm->size(), r = comm->rank();
  std::shared_ptr<Communicator> shard = plan.shard_group_size == n ? comm : comm->split(plan.shard_group_color(r), r);
  std::shared_ptr<Communicator> replicate;
  if (plan.replicas == n) {
    replicate = comm;
  } else if (plan.replicas > 1) {
    replicate = comm->split(plan.replica_group_color(r), r);
  }
  return {shard, replicate};
}

}  // namespace

ShardGroups make_shard_groups(Session& session, const ShardingOptions& options, bool on_cuda) {
  ShardGroups g;
  g.comm = on_cuda ? session.device_world() : session.world();
  ZS_REQUIRE(options.hpz_group_size == 1 || options.offload_params.target == OffloadTarget::kDevice, ConfigError,
             "sharding.hpz_group_size = ", options.hpz_group_size, " keeps a slice of each unit's gathered parameters "
             "in memory from forward to backward, but offload.params = ", to_string(options.offload_params.target),
             " moves the parameter shards out of memory; set sharding.hpz_group_size = 1 or keep the parameters on "
             "the device");
  if (g.comm->size() == 1) {
    ShardingPlan one = plan_sharding(options.strategy, 1, 1, 1);  // one rank: any hybrid group size
    plan_secondary_groups(one, options.hpz_group_size, std::vector<int>{0});  // ConfigError unless hpZ is off
    g.shard_group = g.comm;
    g.host_shard_group = session.world();
    return g;
  }
  const std::vector<int> nodes = agree_on_plan(session, options);
  ShardingPlan plan = plan_sharding(options.strategy, options.hybrid_group_size, nodes);
  plan_secondary_groups(plan, options.hpz_group_size, nodes);
  if (plan.secondary_groups_cross_nodes && g.comm->rank() == 0) {
    ZS_LOG(kWarn) << "sharding.hpz_group_size = " << options.hpz_group_size << ": secondary groups of "
                  << plan.secondary_group_size << " consecutive ranks span two nodes in this placement, so "
                     "backward's gathers cross the network; use hpz_group_size = 0 (the ranks of a node)";
  }
  if (plan.groups_cross_nodes && g.comm->rank() == 0) {
    ZS_LOG(kWarn) << "sharding.hybrid_group_size = " << plan.shard_group_size << ": shard groups of consecutive "
                  << "ranks span two nodes in this placement (ranks are not placed by node), so their all-gathers "
                     "cross the network; place ranks by node (mpirun --map-by slot) or use hybrid_group_size = 0 "
                     "(a group per node)";
  }
  std::tie(g.shard_group, g.replicate_group) = split_groups(g.comm, plan);
  if (plan.secondary_group_size > 1) {
    const int r = g.comm->rank();
    g.secondary_group = g.shard_group->split(plan.secondary_group_color(r), r);
  }
  if (!on_cuda) {
    g.host_shard_group = g.shard_group;
    g.host_replicate_group = g.replicate_group;
  } else {
    std::tie(g.host_shard_group, g.host_replicate_group) = split_groups(session.world(), plan);
  }
  return g;
}

std::string describe_flat(const FlatParam& f) {
  const std::string kind =
      f.trainable() ? "" : f.codec() != nullptr ? std::string(" frozen ") + f.codec()->name() : " frozen";
  std::ostringstream os;
  for (const ParamSlot& s : f.slots()) {
    os << "  parameter '" << s.name << "' shape " << at::IntArrayRef(s.shape) << " "
       << c10::toString(s.param.scalar_type()) << " " << s.param.device().type() << kind << "\n";
  }
  return os.str();
}

std::vector<const std::vector<ParamSlot>*> UnitSlots::lists() const {
  std::vector<const std::vector<ParamSlot>*> out;
  if (!trainable.empty()) out.push_back(&trainable);
  if (!frozen.empty()) out.push_back(&frozen);
  for (const auto& [codec, list] : encoded) out.push_back(&list);
  return out;
}

void sort_slot(UnitSlots& slots, ParamSlot slot, const torch::nn::Module& owner, const std::string& key,
               const ShardingOptions& options) {
  if (slot.param.requires_grad()) {
    slots.trainable.push_back(std::move(slot));
    return;
  }
  if (slot.aliases.empty()) {
    for (const auto& hook : options.unit_hooks) {
      std::shared_ptr<const ShardCodec> codec = hook->codec_for(owner, key);
      if (codec == nullptr) continue;
      for (auto& [c, list] : slots.encoded) {
        if (c == codec) {
          list.push_back(std::move(slot));
          return;
        }
      }
      slots.encoded.emplace_back(std::move(codec), std::vector<ParamSlot>{});
      slots.encoded.back().second.push_back(std::move(slot));
      return;
    }
  }
  slots.frozen.push_back(std::move(slot));
}

std::string flat_name(const std::string& unit, bool trainable, const ShardCodec* codec) {
  if (trainable) return unit;
  return unit + (codec != nullptr ? std::string(" (") + codec->name() + ")" : std::string(" (frozen)"));
}

std::vector<std::unique_ptr<FlatParam>> make_unit_flats(const std::string& unit, UnitSlots slots,
                                                        const ShardGroups& groups, MemoryStats* mem,
                                                        const ShardingOptions& options) {
  const bool offloaded = options.offload_params.target != OffloadTarget::kDevice;
  ZS_REQUIRE(!options.keep_param_dtype_shard || (offloaded && options.param_dtype != c10::kFloat), UsageError,
             "ShardingOptions: keep_param_dtype_shard keeps a param_dtype copy of offloaded shards; it needs "
             "offload_params.target CPU or NVME (got ", to_string(options.offload_params.target),
             ") and a param_dtype other than Float (got ", c10::toString(options.param_dtype), ")");
  ZS_REQUIRE(slots.encoded.empty() || !offloaded, UsageError, "unit '", unit, "': frozen parameters stored as ",
             slots.encoded.empty() ? "" : slots.encoded.front().first->name(),
             " stay in memory and cannot go to a parameter store (offload_params.target = ",
             to_string(options.offload_params.target), "); keep the parameters on the device");
  std::vector<std::unique_ptr<FlatParam>> flats;
  auto add = [&](std::vector<ParamSlot>& list, bool trainable, std::shared_ptr<const ShardCodec> codec) {
    if (list.empty()) return;
    const bool encoded = codec != nullptr;
    flats.push_back(std::make_unique<FlatParam>(flat_name(unit, trainable, codec.get()), std::move(list), trainable,
                                                groups.shard_group, groups.replicate_group, mem, options.param_dtype,
                                                options.reduce_dtype, offloaded && !encoded, std::move(codec)));
    if (!encoded) {
      flats.back()->quantize_gathers(options.gather_quant_block);
      // Encoded shards gather their compact encoding; a param_dtype slice would gather more bytes.
      if (groups.secondary_group != nullptr) flats.back()->use_secondary_group(groups.secondary_group);
    }
    if (trainable) flats.back()->quantize_reduces(options.reduce_quant_block);
  };
  add(slots.trainable, true, nullptr);
  add(slots.frozen, false, nullptr);
  for (auto& [codec, list] : slots.encoded) add(list, false, codec);
  return flats;
}

void check_same_description(Communicator& world, const std::string& mine, const std::string& what) {
  if (world.size() == 1) return;
  const int n = world.size();
  at::Tensor hashes = at::empty({n}, at::kLong);
  at::Tensor my_hash = at::full({1}, static_cast<int64_t>(std::hash<std::string>{}(mine) >> 1), at::kLong);
  world.all_gather_into(hashes, my_hash, "zs.structure_hash")->wait();
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    if (hashes[r].item<int64_t>() != hashes[0].item<int64_t>()) differ.push_back(r);
  }
  if (differ.empty()) return;
  // Name the first difference: rank 0 sends its description to everyone.
  at::Tensor len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  world.broadcast(len, 0, "zs.structure_len")->wait();
  at::Tensor text = at::empty({len.item<int64_t>()}, at::kByte);
  if (world.rank() == 0) std::memcpy(text.data_ptr(), mine.data(), mine.size());
  world.broadcast(text, 0, "zs.structure_text")->wait();
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
      ZS_THROW(UsageError, "ranks build different ", what, " (ranks differing from rank 0: ", ranks.str(),
               "). First difference on this rank, in ", unit_a.empty() ? std::string("the unit list") : unit_a,
               ": rank 0 has '", ga ? la : std::string("<nothing>"), "' but this rank has '",
               gb ? lb : std::string("<nothing>"), "'. Build the same model on every rank (same config, no "
               "rank-dependent modules) before wrapping it.");
    }
  }
  ZS_THROW(UsageError, "ranks build different ", what, ": ranks ", ranks.str(),
           " differ from rank 0 (their error messages name the first difference)");
}

}  // namespace zeroshard::detail
