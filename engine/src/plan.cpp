// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/engine/plan.h"

#include "zeroshard/engine/options.h"

#include <algorithm>
#include <map>
#include <sstream>

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

}  // namespace zeroshard
