// SPDX-License-Identifier: Apache-2.0
// ShardedInit: units are sharded as they are constructed (no rank ever holds the whole model), and
// training from such a model equals plain LibTorch training.

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <unordered_set>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr int kSteps = 5;

std::pair<torch::Tensor, torch::Tensor> batch(int step, int64_t n) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(500 + step);
  zs_test::GptConfig c;
  return {torch::randint(c.vocab, {n, c.seq}, g), torch::randint(c.vocab, {n, c.seq}, g)};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

}  // namespace

TEST(ShardedInit, UnitsAreShardedAsTheyAreBuiltAndTrainLikePlainLibTorch) {
  auto& s = zs::test::session();
  const int world = s.world_size(), rank = s.rank();
  const int64_t local = 2;
  // Reference: plain LibTorch on the global batch.
  torch::manual_seed(11);
  zs_test::Gpt ref;
  std::vector<torch::Tensor> params;
  std::unordered_set<const void*> seen;
  for (auto& p : ref->parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    auto [x, y] = batch(step, local * world);
    loss_of(ref->forward(x), y).backward();
    opt.step();
  }
  // Sharded at construction.
  zs::ShardingOptions o;
  o.strategy = Strategy::kFullShard;
  torch::manual_seed(11);
  zs::ShardedInit init(s, o);
  zs_test::Gpt model;
  EXPECT_EQ(init.units_sharded(), static_cast<int>(model->cfg.layers));
  for (auto& b : model->blocks) {
    for (auto& p : b->parameters()) {
      // At world size > 1 the block's parameters are resharded already: no bytes behind them.
      if (world > 1) EXPECT_EQ(p.storage().nbytes(), 0u) << "a block parameter still holds its full storage";
    }
  }
  zs::ShardingEngine engine(init, model.ptr());
  zs::AdamOptions ao;
  ao.lr = 1e-2;
  auto zopt = zs::make_adamw(ao);
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, local * world);
    auto mine_x = x.narrow(0, rank * local, local), mine_y = y.narrow(0, rank * local, local);
    engine.forward([&] { return loss_of(model->forward(mine_x), mine_y); }).backward();
    engine.step(*zopt);
    engine.zero_grad();
  }
  auto sd = engine.full_state_dict();
  double worst = 0;
  for (const auto& item : ref->named_parameters()) {
    ASSERT_TRUE(sd.count(item.key())) << item.key();
    worst = std::max(worst, zs::test::max_abs_diff(sd[item.key()], item.value()));
  }
  EXPECT_LE(worst, 1e-5) << "sharded-at-construction training differs from plain LibTorch";
  EXPECT_TRUE(at::equal(sd["wte.weight"], sd["lm_head_weight"]));
}

namespace {

int64_t unique_param_bytes(torch::nn::Module& m) {
  int64_t n = 0;
  std::unordered_set<const void*> seen;
  for (auto& p : m.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += 4 * p.numel();
  }
  return n;
}

}  // namespace

// No rank ever holds the whole model while it is built: host allocator truth (a window over the
// construction, not the engine's own counters) stays within the root's own parameters, the
// shards built so far and the unit being sharded (its parameters as built, the flat copy, its
// shard), where a plain build holds the whole model. Many blocks, each large next to the root's
// own parameters, so that one unit and the whole model are far apart.
TEST(ShardedInit, BuildingHoldsOneUnitBeyondTheShards) {
  auto& s = zs::test::session();
  const int world = s.world_size();
  zs_test::GptConfig c;
  c.dim = 64;
  c.layers = 16;
  zs::begin_host_memory_window();
  int64_t whole = 0;
  {
    zs_test::Gpt plain(c);
    whole = unique_param_bytes(*plain);
  }
  const int64_t plain_peak = zs::host_memory_window_peak();
  EXPECT_GE(plain_peak, whole) << "the allocator window must see a plain build allocate the whole model";

  zs::ShardedInit init(s, zs::ShardingOptions{});
  zs::begin_host_memory_window();
  zs_test::Gpt model(c);
  const int64_t peak = zs::host_memory_window_peak();
  init.stop();
  int64_t unit = 0, shards = 0;
  for (auto& b : model->blocks) {
    int64_t n = 0;
    for (auto& p : b->parameters()) n += p.numel();
    const int64_t padded = (n + world - 1) / world * world;
    unit = std::max(unit, 4 * padded);
    shards += 4 * padded / world;
  }
  const int64_t root = whole - static_cast<int64_t>(model->blocks.size()) * unit;
  const int64_t bound = std::max<int64_t>(root, 0) + shards + 3 * unit + 32 * 1024;
  if (s.rank() == 0) {
    std::printf("  build peak (host allocator): plain %lld B, ShardedInit %lld B (bound %lld) at %d ranks\n",
                static_cast<long long>(plain_peak), static_cast<long long>(peak), static_cast<long long>(bound), world);
  }
  EXPECT_LE(peak, bound) << "building under ShardedInit held more than one unit beyond the shards";
  if (world > 1) EXPECT_LT(peak, whole) << "a rank held as much as the whole model while building it";
}

TEST(ShardedInit, DifferentUnitsAcrossRanksAreNamed) {
  ZS_REQUIRE_RANKS(2);
  auto& s = zs::test::session();
  zs::ShardedInit init(s, zs::ShardingOptions{});
  zs_test::GptConfig c;
  if (s.rank() == 1) c.dim = 16;  // rank 1 builds wider blocks
  try {
    zs_test::Gpt model(c);
    ADD_FAILURE() << "building different units on different ranks was not detected";
  } catch (const zs::UsageError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("ranks build different units at construction"), std::string::npos) << what;
    if (s.rank() == 1) EXPECT_NE(what.find("but this rank has"), std::string::npos) << what;
  }
}

TEST(ShardedInit, UnitsOutsideTheWrappedModelAreAnError) {
  auto& s = zs::test::session();
  zs::ShardedInit init(s, zs::ShardingOptions{});
  zs_test::Mlp stray;  // its blocks are sharded by init...
  init.stop();
  zs_test::Mlp model;  // ...but this one, built after deactivation, is what we wrap
  try {
    zs::ShardingEngine engine(init, model.ptr());
    ADD_FAILURE() << "units sharded for another model were silently ignored";
  } catch (const zs::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not part of the model"), std::string::npos) << e.what();
  }
}
