// Strategies and buffers as a real job meets them:
//  - HYBRID_SHARD groups: with hybrid_group_size 0 a shard group is a node's ranks whatever the
//    placement (the plan, computed from each rank's node); ranks that disagree on the strategy or
//    group size all fail alike instead of hanging in a split;
//  - buffers: one collective for all of them per step (BatchNorm nets have many), at the point
//    sharding.buffer_sync says.
// Run at 1, 2 and 4 ranks; checks that need several ranks skip visibly.

#include "sharding/engine_test_util.h"
#include "zeroshard/sharding/plan.h"

namespace {

// The sequence number the world communicator gives its next collective.
uint64_t next_world_seq() {
  auto w = zs::test::world()->barrier("test.seq");
  w->wait();
  return w->signature().seq + 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// HYBRID_SHARD groups

// Four ranks on two nodes placed round-robin (mpirun --map-by node): node 0 holds ranks 0 and 2.
// hybrid_group_size 0 must make {0, 2} and {1, 3} the shard groups, not the blocks {0, 1}, {2, 3}.
TEST(Plan, HybridGroupsAreNodesWhateverThePlacement) {
  const zs::ShardingPlan p = zs::plan_sharding(Strategy::kHybridShard, 0, std::vector<int>{7, 9, 7, 9});
  EXPECT_TRUE(p.groups_by_node);
  EXPECT_EQ(p.shard_group_size, 2);
  EXPECT_EQ(p.replicas, 2);
  EXPECT_EQ(p.shard_group_color(0), p.shard_group_color(2));
  EXPECT_EQ(p.shard_group_color(1), p.shard_group_color(3));
  EXPECT_NE(p.shard_group_color(0), p.shard_group_color(1));
  EXPECT_EQ(p.replica_group_color(0), p.replica_group_color(1)) << "first rank of each node";
  EXPECT_EQ(p.replica_group_color(2), p.replica_group_color(3));
  EXPECT_NE(p.replica_group_color(0), p.replica_group_color(2));
  // Placed by node: the same groups as blocks.
  const zs::ShardingPlan blocks = zs::plan_sharding(Strategy::kHybridShard, 0, std::vector<int>{0, 0, 1, 1});
  EXPECT_EQ(blocks.shard_group_color(0), blocks.shard_group_color(1));
  EXPECT_NE(blocks.shard_group_color(1), blocks.shard_group_color(2));
  // An explicit size keeps blocks of consecutive ranks, and says when they straddle nodes.
  const zs::ShardingPlan explicit_size = zs::plan_sharding(Strategy::kHybridShard, 2, std::vector<int>{0, 1, 0, 1});
  EXPECT_FALSE(explicit_size.groups_by_node);
  EXPECT_EQ(explicit_size.shard_group_color(0), explicit_size.shard_group_color(1));
  EXPECT_TRUE(explicit_size.groups_cross_nodes);
  EXPECT_FALSE(zs::plan_sharding(Strategy::kHybridShard, 2, std::vector<int>{0, 0, 1, 1}).groups_cross_nodes);
}

TEST(Plan, NodesOfDifferentSizesAreAConfigErrorNamingThem) {
  std::string msg = "<no exception>";
  try {
    zs::plan_sharding(Strategy::kHybridShard, 0, std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2});
  } catch (const zs::ConfigError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "same number of ranks")) << msg;
  EXPECT_TRUE(contains(msg, "between 2 and 3")) << msg;
  EXPECT_TRUE(contains(msg, "sharding.hybrid_group_size")) << msg;
  // Other strategies do not care how ranks sit on nodes.
  EXPECT_EQ(zs::plan_sharding(Strategy::kFullShard, 0, std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}).shard_group_size, 8);
}

// On this machine every rank shares one node: hybrid_group_size 0 is one group of all ranks.
TEST(Hybrid, GroupSizeZeroIsTheNode) {
  zs_test::Mlp model = keep_alive(zs_test::Mlp());
  zs::ShardingOptions o = options_for(Strategy::kHybridShard);
  o.hybrid_group_size = 0;
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
  EXPECT_EQ(engine.shard_group_size(), zs::test::session().local_world_size());
  EXPECT_EQ(engine.replica_rank(), 0);
}

// Rank 1 was given another group size: every rank fails with the same ConfigError naming both
// values and their ranks, and the ranks stay in step (no split half of them skip).
TEST(Hybrid, RanksThatDisagreeOnTheGroupSizeFailAlike) {
  ZS_REQUIRE_RANKS(2);
  zs_test::Mlp model = keep_alive(zs_test::Mlp());
  zs::ShardingOptions o = options_for(Strategy::kHybridShard);
  o.hybrid_group_size = zs::test::rank() == 1 ? 1 : 2;
  std::string msg = "<no exception>";
  try {
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
  } catch (const zs::ConfigError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "ranks disagree on sharding.hybrid_group_size")) << msg;
  EXPECT_TRUE(contains(msg, "1 on rank 1")) << msg;
  EXPECT_TRUE(contains(msg, "2 on rank")) << msg;
  zs::ShardingOptions s = options_for(zs::test::rank() == 1 ? Strategy::kShardGradOp : Strategy::kFullShard);
  msg = "<no exception>";
  try {
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), s);
  } catch (const zs::ConfigError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "ranks disagree on sharding.strategy")) << msg;
  EXPECT_TRUE(contains(msg, "SHARD_GRAD_OP on rank 1")) << msg;
  at::Tensor one = at::ones({1});
  zs::test::world()->all_reduce(one, zs::ReduceOp::kSum, "test.after_disagreement")->wait();
  EXPECT_EQ(one.item<float>(), static_cast<float>(zs::test::world_size()));
}

// ---------------------------------------------------------------------------------------------
// Buffers: one collective for all of them

// BnNet has two BatchNorm layers: four floating buffers and two counters. AVERAGE: step() issues
// one all-reduce on the world communicator (it issued one per floating buffer); BROADCAST:
// engine.forward issues one broadcast and step() none; NONE: neither.
TEST(Buffers, OneCollectiveForAllBuffers) {
  ZS_REQUIRE_RANKS(2);
  for (auto sync : {zs::BufferSync::kAverage, zs::BufferSync::kBroadcast, zs::BufferSync::kNone}) {
    SCOPED_TRACE(zs::to_string(sync));
    torch::manual_seed(5);
    zs_test::BnNet model = keep_alive(zs_test::BnNet());
    EXPECT_EQ(model->buffers().size(), 6u);
    zs::ShardingOptions o = options_for(Strategy::kNoShard);  // no gathers: the forward's own collectives are buffers'
    o.buffer_sync = sync;
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
    auto opt = zs::make_sgd(zs::SgdOptions{});
    auto g = torch::make_generator<at::CPUGeneratorImpl>(60 + zs::test::rank());
    torch::Tensor x = torch::randn({8, 7}, g), y = torch::randn({8, 5}, g);
    uint64_t before = next_world_seq();
    torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
    const uint64_t in_forward = next_world_seq() - before - 1;
    loss.backward();
    before = next_world_seq();
    engine.step(*opt);
    const uint64_t in_step = next_world_seq() - before - 1;
    EXPECT_EQ(in_forward, sync == zs::BufferSync::kBroadcast ? 1u : 0u);
    EXPECT_EQ(in_step, sync == zs::BufferSync::kAverage ? 1u : 0u);
    // And the values: equal on every rank except under NONE (different data per rank).
    std::map<std::string, at::Tensor> buffers;
    for (const auto& b : model->named_buffers()) buffers[b.key()] = b.value();
    const double spread = max_difference_from_rank0(buffers);
    if (sync == zs::BufferSync::kAverage) EXPECT_EQ(spread, 0.0);
    if (sync == zs::BufferSync::kNone) EXPECT_GT(spread, 0.0);
    if (sync == zs::BufferSync::kBroadcast) {
      model->eval();  // the broadcast comes first, then the forward leaves the statistics alone
      torch::NoGradGuard no_grad;
      engine.forward([&] { return model->forward(x); });
      model->train();
      EXPECT_EQ(max_difference_from_rank0(buffers), 0.0);
    }
  }
}
