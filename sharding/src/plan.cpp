#include "zeroshard/sharding/plan.h"

#include "zeroshard/sharding/options.h"

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

const char* to_string(OffloadTarget t) {
  switch (t) {
    case OffloadTarget::kDevice: return "DEVICE";
    case OffloadTarget::kCpu: return "CPU";
    case OffloadTarget::kNvme: return "NVME";
  }
  return "unknown offload target";
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

}  // namespace zeroshard
