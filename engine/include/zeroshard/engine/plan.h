// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sharding strategies and the plan a strategy resolves to on a given job: how many ranks share
// each flat parameter, how many replicas there are, and whether parameters are freed after the
// forward. The engine builds its communicators from the plan and the memory estimator replays a
// step from it, so the two cannot disagree about what a strategy means. Pure; thread-safe.

#include <string>
#include <vector>

namespace zeroshard {

enum class ShardingStrategy {
  kFullShard,    // FULL_SHARD (ZeRO-3): gather before forward, free after; again for backward
  kShardGradOp,  // SHARD_GRAD_OP (ZeRO-2): parameters stay gathered from forward until backward
  kNoShard,      // NO_SHARD (DDP): parameters replicated, gradients all-reduced
  kHybridShard,  // HYBRID_SHARD: FULL_SHARD inside groups, replicated across groups
};
// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" (the config's names).
const char* to_string(ShardingStrategy s);

enum class BackwardPrefetch { kNone, kBackwardPre, kBackwardPost };
const char* to_string(BackwardPrefetch p);  // "NONE", "BACKWARD_PRE", "BACKWARD_POST"

enum class AutoWrapPolicy { kNone, kSizeBased, kModuleType };
const char* to_string(AutoWrapPolicy p);  // "NONE", "SIZE_BASED", "MODULE_TYPE"

struct ShardingPlan {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int world_size = 1;
  int shard_group_size = 1;  // ranks that split each flat parameter (N in the ZeRO formulas)
  int replicas = 1;          // world_size / shard_group_size
  bool reshard_after_forward = true;  // FULL_SHARD, HYBRID_SHARD: free gathered params after forward
  bool keep_gathered = false;         // NO_SHARD: parameters are gathered once and never freed
  // HYBRID_SHARD with hybrid_group_size 0 on a known placement: each node's ranks are a shard
  // group, wherever the launcher placed them (mpirun --map-by node puts consecutive ranks on
  // different nodes). Otherwise shard groups are blocks of shard_group_size consecutive ranks.
  bool groups_by_node = false;
  std::vector<int> node_of_rank;   // with groups_by_node: the node of every world rank
  std::vector<int> index_on_node;  // with groups_by_node: each rank's position among its node's
  // Blocks of consecutive ranks that span two nodes although one node could hold a whole group
  // (a placement the group size did not expect): worth a warning, traffic crosses the network.
  bool groups_cross_nodes = false;
  // hpZ (ShardingOptions::hpz_group_size; ZeRO++'s secondary partition): each shard group is split
  // into secondary groups of secondary_group_size ranks; after a unit's forward every rank keeps
  // 1/secondary_group_size of its gathered parameters, and backward gathers them inside the
  // secondary group instead of over the whole shard group. 1: no hpZ. secondary_color_of_rank:
  // the color of every world rank for splitting its shard group (empty without hpZ);
  // secondary_groups_cross_nodes: a secondary group spans two nodes (its gathers leave the node).
  int secondary_group_size = 1;
  std::vector<int> secondary_color_of_rank;
  bool secondary_groups_cross_nodes = false;

  // Colors for Communicator::split: a shard group per node or block; replica groups take the
  // ranks at the same position of every group.
  int shard_group_color(int rank) const {
    return groups_by_node ? node_of_rank[static_cast<size_t>(rank)] : rank / shard_group_size;
  }
  int replica_group_color(int rank) const {
    return groups_by_node ? index_on_node[static_cast<size_t>(rank)] : rank % shard_group_size;
  }
  int secondary_group_color(int rank) const { return secondary_color_of_rank[static_cast<size_t>(rank)]; }
};

// The plan for `strategy` on `world_size` ranks with `ranks_per_node` ranks on each host.
// `hybrid_group_size` (HYBRID_SHARD only) is the shard group size; 0 means the ranks of one node.
// Throws ConfigError naming sharding.hybrid_group_size when it does not divide the world size,
// and for a world size or ranks per node below 1.
// Shard groups are blocks of consecutive ranks (what the estimator assumes).
ShardingPlan plan_sharding(ShardingStrategy strategy, int hybrid_group_size, int world_size, int ranks_per_node);

// The plan on a job whose world rank r runs on node node_of_rank[r] (any numbering): as above,
// except that HYBRID_SHARD with hybrid_group_size 0 makes each node a shard group (and needs the
// same number of ranks on every node: ConfigError naming the nodes otherwise), and that blocks
// spanning nodes are flagged (groups_cross_nodes). What the engine builds its communicators from.
ShardingPlan plan_sharding(ShardingStrategy strategy, int hybrid_group_size, const std::vector<int>& node_of_rank);

// Adds hpZ's secondary groups to `plan` (made for the job whose world rank r runs on node
// node_of_rank[r]). `hpz_group_size`: ranks per secondary group, consecutive within each shard
// group; 0 means the ranks of a shard group that share a node; 1 leaves the plan without hpZ.
// ConfigError naming sharding.hpz_group_size unless the strategy reshards after forward
// (FULL_SHARD, HYBRID_SHARD) and every secondary group has the same size, above 1 and below the
// shard group's, dividing it.
void plan_secondary_groups(ShardingPlan& plan, int hpz_group_size, const std::vector<int>& node_of_rank);
// The same on world_size / ranks_per_node nodes of consecutive ranks (the estimator's placement).
void plan_secondary_groups(ShardingPlan& plan, int hpz_group_size, int ranks_per_node);

}  // namespace zeroshard
