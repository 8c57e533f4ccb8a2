// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/engine/plan.h"

#include "zeroshard/engine/options.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "zeroshard/base/error.h"

namespace zeroshard {

const char* to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
  }
  return "unknown strategy";
}

const char* to_string(BackwardPrefetch p) {
  switch (p) {
    case BackwardPrefetch::kNone: return "NONE";
    case BackwardPrefetch::kBackwardPre: return "BACKWARD_PRE";
    case BackwardPrefetch::kBackwardPost: return "BACKWARD_POST";
  }
  return "unknown backward prefetch";
}

const char* to_string(AutoWrapPolicy p) {
  switch (p) {
    case AutoWrapPolicy::kNone: return "NONE";
    case AutoWrapPolicy::kSizeBased: return "SIZE_BASED";
    case AutoWrapPolicy::kModuleType: return "MODULE_TYPE";
  }
  return "unknown auto-wrap policy";
}


ShardingPlan plan_sharding(ShardingStrategy strategy, int hybrid_group_size, int world_size, int ranks_per_node) {
  ZS_REQUIRE(world_size >= 1, ConfigError, "world size ", world_size, " must be at least 1");
  ZS_REQUIRE(ranks_per_node >= 1, ConfigError, "ranks per node ", ranks_per_node, " must be at least 1");
  ShardingPlan p;
  p.strategy = strategy;
  p.world_size = world_size;
  switch (strategy) {
    case ShardingStrategy::kFullShard:
      p.shard_group_size = world_size;
      break;
    case ShardingStrategy::kShardGradOp:
      p.shard_group_size = world_size;
      p.reshard_after_forward = false;
      break;
    case ShardingStrategy::kNoShard:
      p.shard_group_size = 1;
      p.reshard_after_forward = false;
      p.keep_gathered = true;
      break;
    case ShardingStrategy::kHybridShard: {
      const int g = hybrid_group_size > 0 ? hybrid_group_size : ranks_per_node;
      ZS_REQUIRE(world_size % g == 0, ConfigError, "sharding.hybrid_group_size = ", g,
                 " does not divide the world size ", world_size, "; allowed: a divisor of ", world_size,
                 " (0 means the ranks of one node, here ", ranks_per_node, ")");
      p.shard_group_size = g;
      break;
    }
    default:
      ZS_THROW(ConfigError, "sharding.strategy has an unknown value ", static_cast<int>(strategy));
  }
  p.replicas = world_size / p.shard_group_size;
  return p;
}

ShardingPlan plan_sharding(ShardingStrategy strategy, int hybrid_group_size, const std::vector<int>& node_of_rank) {
  const int world = static_cast<int>(node_of_rank.size());
  ZS_REQUIRE(world >= 1, ConfigError, "world size ", world, " must be at least 1");
  // Nodes in order of their lowest rank, with their ranks.
  std::map<int, std::vector<int>> ranks_of;
  std::vector<int> order;
  for (int r = 0; r < world; ++r) {
    auto& list = ranks_of[node_of_rank[static_cast<size_t>(r)]];
    if (list.empty()) order.push_back(node_of_rank[static_cast<size_t>(r)]);
    list.push_back(r);
  }
  size_t smallest = ranks_of.begin()->second.size(), largest = smallest;
  for (const auto& [node, list] : ranks_of) smallest = std::min(smallest, list.size()), largest = std::max(largest, list.size());
  const bool by_node = strategy == ShardingStrategy::kHybridShard && hybrid_group_size == 0 && world > 1;
  if (by_node && smallest != largest) {
    std::ostringstream nodes;
    for (size_t i = 0; i < order.size(); ++i) {
      const auto& list = ranks_of[order[i]];
      nodes << (i ? "; " : "") << "node " << i << ": " << list.size() << " rank(s) (" << list.front()
            << (list.size() > 1 ? ", ..." : "") << ")";
    }
    ZS_THROW(ConfigError, "sharding.hybrid_group_size = 0 makes each node's ranks a shard group, so every node "
             "must run the same number of ranks, but this job's nodes run between ", smallest, " and ", largest,
             " (", nodes.str(), "); launch the same number of ranks per node, or set sharding.hybrid_group_size "
             "to a divisor of the world size ", world);
  }
  ShardingPlan p = plan_sharding(strategy, hybrid_group_size, world, static_cast<int>(largest));
  if (by_node) {
    p.groups_by_node = true;
    p.node_of_rank.resize(static_cast<size_t>(world));
    p.index_on_node.resize(static_cast<size_t>(world));
    for (size_t i = 0; i < order.size(); ++i) {
      const auto& list = ranks_of[order[i]];
      for (size_t k = 0; k < list.size(); ++k) {
        p.node_of_rank[static_cast<size_t>(list[k])] = static_cast<int>(i);
        p.index_on_node[static_cast<size_t>(list[k])] = static_cast<int>(k);
      }
    }
    return p;
  }
  if (p.shard_group_size > 1 && p.shard_group_size <= static_cast<int>(smallest)) {
    for (int r = 0; r + 1 < world; ++r) {
      if (p.shard_group_color(r) == p.shard_group_color(r + 1) &&
          node_of_rank[static_cast<size_t>(r)] != node_of_rank[static_cast<size_t>(r + 1)]) {
        p.groups_cross_nodes = true;
      }
    }
  }
  return p;
}

void plan_secondary_groups(ShardingPlan& p, int hpz_group_size, const std::vector<int>& node_of_rank) {
  p.secondary_group_size = 1;
  p.secondary_color_of_rank.clear();
  p.secondary_groups_cross_nodes = false;
  if (hpz_group_size == 1) return;
  const std::string key = "sharding.hpz_group_size = " + std::to_string(hpz_group_size);
  ZS_REQUIRE(hpz_group_size >= 0, ConfigError, key, " is negative; allowed: 0 (the ranks of a node), 1 (no hpZ) "
             "or a divisor of the shard group size");
  ZS_REQUIRE(p.reshard_after_forward, ConfigError, key, " keeps a slice of each unit's parameters from forward "
             "to backward so that backward gathers inside a smaller group, but sharding.strategy = ",
             to_string(p.strategy), p.keep_gathered ? " never shards the parameters" : " keeps them gathered from "
             "forward to backward", "; use FULL_SHARD or HYBRID_SHARD, or set sharding.hpz_group_size = 1");
  const int world = p.world_size;
  ZS_REQUIRE(static_cast<int>(node_of_rank.size()) == world, ConfigError, key, ": the placement names ",
             node_of_rank.size(), " ranks for a world of ", world);
  const int n = p.shard_group_size;
  // Each shard group's ranks in world-rank order (their order in the group).
  std::map<int, std::vector<int>> members;
  for (int r = 0; r < world; ++r) members[p.shard_group_color(r)].push_back(r);
  std::vector<int> color(static_cast<size_t>(world), 0);
  int size = -1;
  for (const auto& [group, ranks] : members) {
    std::map<int, int> count;  // color -> ranks
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      const int c = hpz_group_size > 0 ? static_cast<int>(i) / hpz_group_size : node_of_rank[static_cast<size_t>(r)];
      color[static_cast<size_t>(r)] = c;
      ++count[c];
    }
    for (const auto& [c, k] : count) {
      ZS_REQUIRE(size < 0 || k == size, ConfigError, key, (hpz_group_size == 0 ? " makes the ranks of a shard group "
                 "that share a node a secondary group, so every node must run the same number of each shard "
                 "group's ranks, but they run between " : " splits the shard groups unevenly: groups of "),
                 std::min(size, k), " and ", std::max(size, k), " ranks; ",
                 hpz_group_size == 0 ? "launch the same number of ranks per node, or set" : "set",
                 " sharding.hpz_group_size to a divisor of the shard group size ", n);
      size = k;
    }
  }
  ZS_REQUIRE(n % size == 0 && size > 1 && size < n, ConfigError, key,
             (hpz_group_size == 0 ? " (the ranks of a shard group on one node: " + std::to_string(size) + ")" : ""),
             " must be above 1, below the shard group size ", n, " and divide it: hpZ's backward gathers run "
             "inside groups smaller than the shard group (", n == 1 ? "a single rank has nothing to gather"
             : size >= n ? "the whole shard group would gather as without hpZ" : "one rank per group gathers nothing",
             "); set sharding.hpz_group_size = 1 to turn hpZ off");
  p.secondary_group_size = size;
  p.secondary_color_of_rank = std::move(color);
  std::map<std::pair<int, int>, int> node_of_group;  // (shard group, secondary color) -> a member's node
  for (int r = 0; r < world; ++r) {
    const int node = node_of_rank[static_cast<size_t>(r)];
    const auto [it, first] = node_of_group.emplace(std::make_pair(p.shard_group_color(r), p.secondary_group_color(r)), node);
    if (!first && it->second != node) p.secondary_groups_cross_nodes = true;
  }
}

void plan_secondary_groups(ShardingPlan& p, int hpz_group_size, int ranks_per_node) {
  ZS_REQUIRE(ranks_per_node >= 1, ConfigError, "ranks per node ", ranks_per_node, " must be at least 1");
  std::vector<int> nodes(static_cast<size_t>(p.world_size));
  for (int r = 0; r < p.world_size; ++r) nodes[static_cast<size_t>(r)] = r / ranks_per_node;
  plan_secondary_groups(p, hpz_group_size, nodes);
}

}  // namespace zeroshard
