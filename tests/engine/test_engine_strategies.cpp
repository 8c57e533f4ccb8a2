// SPDX-License-Identifier: Apache-2.0
// Strategies and buffers as a real job meets them:
//  - HYBRID_SHARD groups: with hybrid_group_size 0 a shard group is a node's ranks whatever the
//    placement (the plan, computed from each rank's node); ranks that disagree on the strategy or
//    group size all fail alike instead of hanging in a split;
//  - the replica all-reduce (HYBRID_SHARD, NO_SHARD) overlaps the rest of backward: a replica that
//    is late does not hold up the backward of the ranks waiting for it;
//  - buffers: one collective for all of them per step (BatchNorm nets have many), at the point
//    sharding.buffer_sync says.
// Run at 1, 2 and 4 ranks; checks that need several ranks skip visibly.

#include <chrono>
#include <thread>

#include "engine/engine_test_util.h"
#include "zeroshard/engine/plan.h"

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
// The replica all-reduce overlaps backward

namespace {

constexpr auto kDelay = std::chrono::milliseconds(1200);

// `late` starts its backward kDelay after the others. Returns, on this rank, the seconds from the
// start of backward until the gradient reached the input of the first block (the last unit's
// backward is done by then), or -1 on `late`.
double seconds_to_first_block(const zs::ShardingOptions& o, int late) {
  torch::manual_seed(3);
  zs_test::Mlp model = keep_alive(zs_test::Mlp(7, 64, 5, 3));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
  for (int step = 0; step < 2; ++step) {  // the second step prefetches, as training does
    auto g = torch::make_generator<at::CPUGeneratorImpl>(40 + zs::test::rank());
    torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
    auto reached = std::make_shared<std::chrono::steady_clock::time_point>();
    torch::Tensor loss = engine.forward([&] {
      torch::Tensor h = model->input(x.to(engine.compute_dtype()));
      h.register_hook([reached](const torch::Tensor&) { *reached = std::chrono::steady_clock::now(); });
      for (auto& b : model->layers) h = b(h);
      return torch::mse_loss(model->output(h).to(torch::kFloat), y);
    });
    zs::test::world()->barrier("test.before_backward")->wait();
    if (step == 1 && zs::test::rank() == late) std::this_thread::sleep_for(kDelay);
    const auto t0 = std::chrono::steady_clock::now();
    loss.backward();
    engine.zero_grad();
    if (step == 1) return zs::test::rank() == late ? -1 : std::chrono::duration<double>(*reached - t0).count();
  }
  return -1;
}

}  // namespace

// HYBRID_SHARD at 4 ranks (shard groups {0, 1} and {2, 3}, replicas {0, 2} and {1, 3}) with rank 2
// late: ranks 0 and 1 only wait for each other's reduce-scatters; the all-reduce with their late
// replicas must not hold their backward up (it did: each unit's all-reduce was waited for on the
// backward thread before the next unit ran). NO_SHARD (fp32 and bf16) likewise at 2 ranks.
TEST(Hybrid, ReplicaAllReduceOverlapsBackward) {
  ZS_REQUIRE_RANKS(2);
  const int world = zs::test::world_size(), rank = zs::test::rank();
  struct Case {
    const char* name;
    Strategy strategy;
    c10::ScalarType dtype;
    int late;
  };
  std::vector<Case> cases = {{"NO_SHARD fp32", Strategy::kNoShard, torch::kFloat, 1},
                             {"NO_SHARD bf16", Strategy::kNoShard, torch::kBFloat16, 1}};
  if (world == 4) cases.push_back({"HYBRID_SHARD", Strategy::kHybridShard, torch::kFloat, 2});
  for (const Case& c : cases) {
    zs::ShardingOptions o = options_for(c.strategy);
    o.hybrid_group_size = 2;
    o.param_dtype = o.reduce_dtype = c.dtype;
    const double s = seconds_to_first_block(o, c.late);
    // Ranks whose replica is the late one, or whose shard partner's replica is: all but the late
    // rank and its shard partner.
    const bool waits_on_late = c.strategy == Strategy::kHybridShard ? rank < 2 : rank != c.late;
    if (waits_on_late) {
      EXPECT_LT(s, 0.5 * std::chrono::duration<double>(kDelay).count())
          << c.name << ": rank " << rank << " reached the first block " << s << " s into backward; its replica "
          << "started backward " << kDelay.count() << " ms late, so the backward waited for the replica all-reduce";
    }
    if (rank == 0) std::printf("  %-14s ranks=%d: first block reached %.4f s into backward (replica %lld ms late)\n", c.name, world, s, static_cast<long long>(kDelay.count()));
  }
}

// ---------------------------------------------------------------------------------------------
// Buffers: one collective for all of them

// BnNet has two BatchNorm layers: four floating buffers and two counters. AVERAGE: step() issues
// one all-reduce for them on the world communicator (it issued one per floating buffer); BROADCAST:
// engine.forward issues one broadcast and step() none for buffers; NONE: neither. Besides, every
// multi-rank step() issues one all-reduce of which ranks' optimizer step failed.
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
    EXPECT_EQ(in_step, 1u + (sync == zs::BufferSync::kAverage ? 1u : 0u));
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
