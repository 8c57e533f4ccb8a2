// SPDX-License-Identifier: Apache-2.0
// hpZ (ShardingOptions::hpz_group_size; config sharding.hpz_group_size): ZeRO++'s secondary
// partition. The plan's secondary groups for every placement and their refusals; at 4 ranks the
// engine with groups of 2 trains bitwise as without hpZ (fp32, bf16, int8 gathers, an activation
// checkpoint), its backward reads the slices kept after the forward and not the shards (a shard
// changed between forward and backward is not seen with hpZ, and is seen without), the slices are
// counted as gathered parameters and are gone after the backward; refusals at 1, 2 and 4 ranks
// with messages naming the key.

#include <gtest/gtest.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src): has_secondary()
#include "zeroshard/base/error.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/plan.h"
#include "zeroshard/engine/unit.h"
#include "zeroshard/optim/optimizer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;
using Strategy = zs::ShardingStrategy;

namespace {

// ---- the plan ----------------------------------------------------------------------------------

std::string plan_error(Strategy strategy, int hybrid, int hpz, const std::vector<int>& nodes) {
  try {
    zs::ShardingPlan p = zs::plan_sharding(strategy, hybrid, nodes);
    zs::plan_secondary_groups(p, hpz, nodes);
  } catch (const zs::ConfigError& e) {
    return e.message();
  }
  return "<no error>";
}

zs::ShardingPlan plan(Strategy strategy, int hybrid, int hpz, const std::vector<int>& nodes) {
  zs::ShardingPlan p = zs::plan_sharding(strategy, hybrid, nodes);
  zs::plan_secondary_groups(p, hpz, nodes);
  return p;
}

std::vector<int> colors(const zs::ShardingPlan& p) {
  std::vector<int> c;
  for (int r = 0; r < p.world_size; ++r) c.push_back(p.secondary_group_color(r));
  return c;
}

TEST(HpzPlan, GroupsAreNodesOrBlocksOfTheShardGroup) {
  const std::vector<int> two_nodes{0, 0, 0, 0, 1, 1, 1, 1};
  const zs::ShardingPlan by_node = plan(Strategy::kFullShard, 0, 0, two_nodes);
  EXPECT_EQ(by_node.secondary_group_size, 4);
  EXPECT_EQ(colors(by_node), two_nodes);
  EXPECT_FALSE(by_node.secondary_groups_cross_nodes);
  const zs::ShardingPlan pairs = plan(Strategy::kFullShard, 0, 2, two_nodes);
  EXPECT_EQ(pairs.secondary_group_size, 2);
  EXPECT_EQ(colors(pairs), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_FALSE(pairs.secondary_groups_cross_nodes);
  // mpirun --map-by node: a node's ranks are not consecutive; 0 still groups by node, a size
  // does not and is flagged (its gathers would cross the network).
  const std::vector<int> alternating{0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_EQ(colors(plan(Strategy::kFullShard, 0, 0, alternating)), alternating);
  EXPECT_FALSE(plan(Strategy::kFullShard, 0, 0, alternating).secondary_groups_cross_nodes);
  EXPECT_TRUE(plan(Strategy::kFullShard, 0, 2, alternating).secondary_groups_cross_nodes);
  // HYBRID_SHARD: inside each shard group of 4 (2 nodes of 2 ranks each), a group per node.
  const zs::ShardingPlan hybrid = plan(Strategy::kHybridShard, 4, 0, {0, 0, 1, 1, 2, 2, 3, 3});
  EXPECT_EQ(hybrid.shard_group_size, 4);
  EXPECT_EQ(hybrid.secondary_group_size, 2);
  EXPECT_EQ(colors(hybrid), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  // 1 is off.
  const zs::ShardingPlan off = plan(Strategy::kFullShard, 0, 1, two_nodes);
  EXPECT_EQ(off.secondary_group_size, 1);
  EXPECT_TRUE(off.secondary_color_of_rank.empty());
  // The estimator's placement (consecutive ranks per node).
  zs::ShardingPlan est = zs::plan_sharding(Strategy::kFullShard, 0, 8, 4);
  zs::plan_secondary_groups(est, 0, 4);
  EXPECT_EQ(colors(est), two_nodes);
}

TEST(HpzPlan, WhatCannotBeMadeIsAConfigErrorNamingTheKey) {
  const std::vector<int> two_nodes{0, 0, 0, 0, 1, 1, 1, 1};
  EXPECT_EQ(plan_error(Strategy::kShardGradOp, 0, 2, two_nodes),
            "sharding.hpz_group_size = 2 keeps a slice of each unit's parameters from forward to backward so that "
            "backward gathers inside a smaller group, but sharding.strategy = SHARD_GRAD_OP keeps them gathered from "
            "forward to backward; use FULL_SHARD or HYBRID_SHARD, or set sharding.hpz_group_size = 1");
  EXPECT_EQ(plan_error(Strategy::kNoShard, 0, 0, two_nodes),
            "sharding.hpz_group_size = 0 keeps a slice of each unit's parameters from forward to backward so that "
            "backward gathers inside a smaller group, but sharding.strategy = NO_SHARD never shards the parameters; "
            "use FULL_SHARD or HYBRID_SHARD, or set sharding.hpz_group_size = 1");
  EXPECT_EQ(plan_error(Strategy::kFullShard, 0, 8, two_nodes),
            "sharding.hpz_group_size = 8 must be above 1, below the shard group size 8 and divide it: hpZ's backward "
            "gathers run inside groups smaller than the shard group (the whole shard group would gather as without "
            "hpZ); set sharding.hpz_group_size = 1 to turn hpZ off");
  EXPECT_EQ(plan_error(Strategy::kFullShard, 0, 3, two_nodes),
            "sharding.hpz_group_size = 3 splits the shard groups unevenly: groups of 2 and 3 ranks; set "
            "sharding.hpz_group_size to a divisor of the shard group size 8");
  EXPECT_EQ(plan_error(Strategy::kFullShard, 0, 0, {0, 0, 0, 1, 1}),
            "sharding.hpz_group_size = 0 makes the ranks of a shard group that share a node a secondary group, so "
            "every node must run the same number of each shard group's ranks, but they run between 2 and 3 ranks; "
            "launch the same number of ranks per node, or set sharding.hpz_group_size to a divisor of the shard "
            "group size 5");
  EXPECT_EQ(plan_error(Strategy::kFullShard, 0, 0, {0, 1, 2, 3}),
            "sharding.hpz_group_size = 0 (the ranks of a shard group on one node: 1) must be above 1, below the "
            "shard group size 4 and divide it: hpZ's backward gathers run inside groups smaller than the shard "
            "group (one rank per group gathers nothing); set sharding.hpz_group_size = 1 to turn hpZ off");
  // HYBRID_SHARD with a shard group per node: the node is the shard group already.
  EXPECT_EQ(plan_error(Strategy::kHybridShard, 0, 0, two_nodes),
            "sharding.hpz_group_size = 0 (the ranks of a shard group on one node: 4) must be above 1, below the "
            "shard group size 4 and divide it: hpZ's backward gathers run inside groups smaller than the shard "
            "group (the whole shard group would gather as without hpZ); set sharding.hpz_group_size = 1 to turn "
            "hpZ off");
  EXPECT_EQ(plan_error(Strategy::kFullShard, 0, -2, two_nodes),
            "sharding.hpz_group_size = -2 is negative; allowed: 0 (the ranks of a node), 1 (no hpZ) or a divisor "
            "of the shard group size");
}

// ---- the engine --------------------------------------------------------------------------------

// The weights each unit computed with, in its forward and when its gradient arrives.
struct Seen {
  std::map<std::string, at::Tensor> forward, backward;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(Seen* seen, std::string name) : seen(seen), name(std::move(name)) {
    fc = register_module("fc", torch::nn::Linear(24, 24));
    fc->weight.register_hook([this](const at::Tensor& g) {
      this->seen->backward[this->name] = fc->weight.detach().to(at::kFloat).clone();
      return g;
    });
  }
  torch::Tensor forward(torch::Tensor x) {
    seen->forward.emplace(name, fc->weight.detach().to(at::kFloat).clone());  // the first run, not a recomputation
    return torch::tanh(fc(x));
  }
  Seen* seen;
  std::string name;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl(Seen* seen, bool ckpt)
      : b0(register_module("b0", zs::Unit<BlockImpl>(seen, "b0"))),
        b1(register_module("b1", zs::Unit<BlockImpl>(seen, "b1"))),
        b2(register_module("b2", zs::Unit<BlockImpl>(seen, "b2"))),
        head(register_module("head", torch::nn::Linear(24, 3))),
        ckpt(ckpt) {}
  torch::Tensor forward(torch::Tensor x) {
    x = b0(x);
    x = ckpt ? zs::checkpoint([this](const at::Tensor& t) { return b1(t); }, x) : b1(x);
    return head(b2(x));
  }
  zs::Unit<BlockImpl> b0, b1, b2;
  torch::nn::Linear head;
  bool ckpt;
};
TORCH_MODULE(Net);

struct Variant {
  int hpz = 1;
  c10::ScalarType dtype = at::kFloat;
  int64_t quant = 0;
  bool ckpt = false;
  std::string what() const {
    return "hpz " + std::to_string(hpz) + " " + c10::toString(dtype) + (quant ? " int8 gathers" : "") +
           (ckpt ? " checkpointed" : "");
  }
};

struct Trained {
  std::vector<float> losses;
  std::map<std::string, at::Tensor> state;
};

Trained train(const Variant& s) {
  Seen seen;
  torch::manual_seed(5);
  Net net(&seen, s.ckpt);
  zs::ShardingOptions o;
  o.param_dtype = s.dtype;
  o.gather_quant_block = s.quant;
  o.hpz_group_size = s.hpz;
  zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
  zs::AdamOptions ao;
  ao.lr = 0.01;
  const std::unique_ptr<zs::ShardedOptimizer> opt = zs::make_adam(ao);
  Trained t;
  for (int step = 0; step < 3; ++step) {
    const at::Tensor x = torch::randn({5, 24}).add(zs::test::rank() + step);
    const at::Tensor y = torch::randn({5, 3});
    at::Tensor loss = engine.forward([&] { return F::mse_loss(net->forward(x.to(s.dtype)).to(at::kFloat), y); });
    loss.backward();
    t.losses.push_back(loss.item<float>());
    engine.step(*opt);
    engine.zero_grad();
  }
  t.state = engine.full_state_dict();
  return t;
}

TEST(Hpz, TrainsBitwiseAsWithoutIt) {
  ZS_REQUIRE_RANKS(4);
  for (const Variant& s : {Variant{2, at::kFloat, 0, false}, Variant{2, at::kBFloat16, 0, true},
                         Variant{2, at::kFloat, 16, false}, Variant{2, at::kBFloat16, 16, true}}) {
    SCOPED_TRACE(s.what());
    Variant without = s;
    without.hpz = 1;
    const Trained a = train(s), b = train(without);
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
      EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i;  // bitwise (NaN never equals)
      EXPECT_TRUE(std::isfinite(a.losses[i]));
    }
    ASSERT_EQ(a.state.size(), b.state.size());
    for (const auto& [name, v] : a.state) EXPECT_TRUE(at::equal(v, b.state.at(name))) << name;
  }
}

// Backward reads the slices: a shard changed behind the engine's back between forward and
// backward (bypassing every point that drops the slices) is not what backward gathers with hpZ,
// and is without it (so the test can tell the paths apart). The checkpointed unit keeps its slice
// too, and its recomputation gathers it.
TEST(Hpz, BackwardGathersTheSlicesKeptAfterTheForward) {
  ZS_REQUIRE_RANKS(4);
  for (int hpz : {2, 1}) {
    SCOPED_TRACE("hpz " + std::to_string(hpz));
    Seen seen;
    torch::manual_seed(5);
    Net net(&seen, /*ckpt=*/true);  // b1's forward runs without gradient recording, recomputed in backward
    zs::ShardingOptions o;
    o.param_dtype = at::kBFloat16;
    o.hpz_group_size = hpz;
    zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
    const at::Tensor x = torch::randn({5, 24}).add(zs::test::rank());
    at::Tensor loss = engine.forward([&] { return F::mse_loss(net->forward(x.to(at::kBFloat16)).to(at::kFloat),
                                                              torch::zeros({5, 3})); });
    int64_t expected_gathered = 0;
    int kept = 0;
    for (zs::FlatParam* f : zs::detail::flat_params(engine)) {
      const bool unit = f->name() != "<root>";
      EXPECT_EQ(f->has_secondary(), hpz > 1 && unit) << f->name();
      EXPECT_EQ(f->gathered(), !unit) << f->name();  // units resharded, the root still gathered
      if (f->has_secondary()) {
        ++kept;
        expected_gathered += f->padded_numel() / hpz * 2;  // bf16 slice
      }
      if (f->gathered()) expected_gathered += f->padded_numel() * 2;
      f->shard().add_(1.0f);
    }
    EXPECT_EQ(kept, hpz > 1 ? 3 : 0);
    EXPECT_EQ(engine.memory().current(zs::MemCategory::kGatheredParams), expected_gathered);
    loss.backward();
    ASSERT_EQ(seen.backward.size(), 3u);
    for (const auto& [name, w] : seen.backward) {
      EXPECT_EQ(at::equal(w, seen.forward.at(name)), hpz > 1) << name;
    }
    for (zs::FlatParam* f : zs::detail::flat_params(engine)) EXPECT_FALSE(f->has_secondary()) << f->name();
    EXPECT_EQ(engine.memory().current(zs::MemCategory::kGatheredParams), 0);
    // A forward under no_grad keeps nothing (no backward follows it).
    {
      torch::NoGradGuard no_grad;
      engine.forward([&] { return net->forward(x.to(at::kBFloat16)); });
    }
    for (zs::FlatParam* f : zs::detail::flat_params(engine)) EXPECT_FALSE(f->has_secondary()) << f->name();
  }
}

std::string engine_error(const zs::ShardingOptions& o) {
  Seen seen;
  Net net(&seen, false);
  try {
    zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
  } catch (const zs::ConfigError& e) {
    return e.message();
  }
  return "<no error>";
}

TEST(Hpz, RefusalsNameTheKey) {
  const int n = zs::test::world_size();
  const std::string tail = " must be above 1, below the shard group size " + std::to_string(n) +
                           " and divide it: hpZ's backward gathers run inside groups smaller than the shard group (" +
                           (n == 1 ? "a single rank has nothing to gather"
                                   : "the whole shard group would gather as without hpZ") +
                           "); set sharding.hpz_group_size = 1 to turn hpZ off";
  zs::ShardingOptions o;
  o.hpz_group_size = std::max(n, 2);
  EXPECT_EQ(engine_error(o), "sharding.hpz_group_size = " + std::to_string(std::max(n, 2)) + tail);
  o.hpz_group_size = 2;
  o.strategy = Strategy::kShardGradOp;
  EXPECT_EQ(engine_error(o),
            "sharding.hpz_group_size = 2 keeps a slice of each unit's parameters from forward to backward so that "
            "backward gathers inside a smaller group, but sharding.strategy = SHARD_GRAD_OP keeps them gathered from "
            "forward to backward; use FULL_SHARD or HYBRID_SHARD, or set sharding.hpz_group_size = 1");
  o.strategy = Strategy::kFullShard;
  o.offload_params.target = zs::OffloadTarget::kCpu;
  EXPECT_EQ(engine_error(o), "sharding.hpz_group_size = 2 keeps a slice of each unit's gathered parameters in memory "
                             "from forward to backward, but offload.params = CPU moves the parameter shards out of "
                             "memory; set sharding.hpz_group_size = 1 or keep the parameters on the device");
  o.offload_params.target = zs::OffloadTarget::kDevice;
  if (n > 1) {
    // Every rank here shares one node: a group per node is the whole shard group.
    o.hpz_group_size = 0;
    EXPECT_EQ(engine_error(o), "sharding.hpz_group_size = 0 (the ranks of a shard group on one node: " +
                                   std::to_string(n) + ")" + tail);
    o.hpz_group_size = zs::test::rank() == 1 ? 1 : 2;
    std::string others;
    for (int r = 0; r < n; ++r) {
      if (r != 1) others += (others.empty() ? "" : ", ") + std::to_string(r);
    }
    EXPECT_EQ(engine_error(o), "ranks disagree on sharding.hpz_group_size: 1 on rank 1; 2 on rank" +
                                   std::string(n > 2 ? "s " : " ") + others +
                                   "; every rank must wrap its model with the same sharding options (the same config)");
    // The ranks stay in step after the refusal.
    at::Tensor one = at::ones({1});
    zs::test::world()->all_reduce(one, zs::ReduceOp::kSum, "test.after_hpz_refusal")->wait();
    EXPECT_EQ(one.item<float>(), static_cast<float>(n));
  }
}

}  // namespace
