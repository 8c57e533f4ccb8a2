// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing under the sharding engine: the GPT test model trained with every
// block call wrapped in zeroshard::checkpoint must end with the same parameters as the same
// sharded training without checkpointing (fp32: bitwise expected, 1e-6 allowed). Units gathered
// again for the recomputation in backward must be freed again (FULL_SHARD: no gathered parameters
// left after a step), and checkpointing may cost at most one more all-gather per block and step
// (the recomputation's; FSDP does the same), never gathers of units nobody uses. 1 and 2 ranks.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr int kSteps = 5;
constexpr int kLocalBatch = 4;
constexpr double kTolerance = 1e-6;

// The engine's registry of declared units is keyed by module address (see engine_test_util.h's
// keep_alive): models built here live until the process ends so no later module reuses an address.
zs_test::Gpt keep_alive(zs_test::Gpt m) {
  static std::vector<zs_test::Gpt> models;
  models.push_back(m);
  return m;
}

// GptImpl::forward with each block call (through its Unit holder, so the engine gathers the unit
// for the forward run and again for the recomputation) wrapped in zeroshard::checkpoint.
torch::Tensor checkpointed_forward(zs_test::GptImpl& m, const torch::Tensor& idx) {
  torch::Tensor pos = torch::arange(idx.size(1), torch::kLong);
  torch::Tensor x = m.wte(idx) + m.wpe(pos);
  for (auto& b : m.blocks) x = zs::checkpoint([b](const at::Tensor& t) mutable { return b(t); }, x);
  return torch::nn::functional::linear(m.ln_f(x), m.wte->weight);
}

torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

// This rank's slice of the global batch of `step`.
// Four blocks, so that a unit gathered needlessly shows in the peak of gathered parameters.
zs_test::GptConfig gpt_config() {
  zs_test::GptConfig c;
  c.layers = 4;
  return c;
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int world) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(3000 + step);
  zs_test::GptConfig c = gpt_config();
  const int64_t n = kLocalBatch * world;
  torch::Tensor x = torch::randint(c.vocab, {n, c.seq}, g), y = torch::randint(c.vocab, {n, c.seq}, g);
  return {x.narrow(0, rank * kLocalBatch, kLocalBatch), y.narrow(0, rank * kLocalBatch, kLocalBatch)};
}

struct Result {
  std::map<std::string, at::Tensor> state;  // empty when training failed
  std::vector<double> losses;
  std::vector<int64_t> gathered_after_step;  // engine.memory().current(kGatheredParams)
  int64_t gathered_peak = 0;
  int64_t all_gather_elements = 0;  // over the whole run
  int64_t block_elements = 0;       // padded elements of all blocks: one gather of every block
  std::string error;                // what the engine threw, if anything
};

Result train(bool ckpt, Strategy strategy) {
  auto& s = zs::test::session();
  torch::manual_seed(7);
  zs_test::Gpt model = keep_alive(zs_test::Gpt(gpt_config()));
  zs::ShardingOptions o;
  o.strategy = strategy;
  zs::ShardingEngine engine(s, model.ptr(), o);
  Result r;
  for (auto& b : model->blocks) {
    int64_t n = 0;
    for (auto& p : b->parameters()) n += p.numel();
    const int64_t g = engine.shard_group_size();
    r.block_elements += (n + g - 1) / g * g;
  }
  zs::AdamOptions ao;
  ao.lr = 3e-3;
  ao.beta2 = 0.95;
  ao.weight_decay = 0.1;
  auto opt = zs::make_adamw(ao);
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, s.rank(), s.world_size());
    // The engine's errors are raised alike on every rank (same model, same step), so returning
    // early here leaves no rank waiting in a collective.
    try {
      torch::Tensor loss = engine.forward([&] {
        return gpt_loss(ckpt ? checkpointed_forward(*model, x) : model->forward(x), y);
      });
      r.losses.push_back(loss.item<double>());
      loss.backward();
    } catch (const std::exception& e) {
      r.error = "step " + std::to_string(step) + ": " + e.what();
      return r;
    }
    engine.step(*opt);
    engine.zero_grad();
    r.gathered_after_step.push_back(engine.memory().current(zs::MemCategory::kGatheredParams));
  }
  r.gathered_peak = engine.memory().peak(zs::MemCategory::kGatheredParams);
  r.all_gather_elements = engine.comm_counters().all_gather_elements;
  r.state = engine.full_state_dict();
  return r;
}

void expect_checkpointing_changes_nothing(Strategy strategy) {
  const int world = zs::test::world_size();
  const std::string name = zs::to_string(strategy);
  Result plain = train(false, strategy);
  ASSERT_EQ(plain.error, "") << "the run without checkpointing failed";
  Result ckpt = train(true, strategy);
  EXPECT_EQ(ckpt.error, "") << name << " at " << world
                            << " ranks: the engine failed during the checkpointed training";
  if (!ckpt.error.empty()) return;

  ASSERT_EQ(plain.losses.size(), ckpt.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_NEAR(plain.losses[i], ckpt.losses[i], kTolerance) << name << " at " << world << " ranks: loss of step " << i;
  }
  double worst = 0;
  std::string worst_name;
  bool bitwise = true;
  for (const auto& [key, value] : plain.state) {
    auto it = ckpt.state.find(key);
    if (it == ckpt.state.end()) {
      ADD_FAILURE() << key << " missing from the checkpointed run's state";
      continue;
    }
    bitwise = bitwise && at::equal(value, it->second);
    const double d = zs::test::max_abs_diff(value, it->second);
    if (d > worst) worst = d, worst_name = key;
  }
  if (zs::test::rank() == 0) {
    std::printf("  %-11s ranks=%d  max|ckpt - plain|=%.3g (%s)%s  gathered peak: plain %lld B, ckpt %lld B;"
                "  all-gather elements: plain %lld, ckpt %lld\n",
                name.c_str(), world, worst, worst_name.empty() ? "-" : worst_name.c_str(), bitwise ? " bitwise" : "",
                static_cast<long long>(plain.gathered_peak), static_cast<long long>(ckpt.gathered_peak),
                static_cast<long long>(plain.all_gather_elements), static_cast<long long>(ckpt.all_gather_elements));
  }
  EXPECT_LE(worst, kTolerance) << name << " at " << world << " ranks: " << worst_name << " differs by " << worst;

  // FULL_SHARD may gather each block once more per step for its recomputation (the forward run
  // freed it); the other strategies keep a unit gathered until its backward, so the recomputation
  // needs no gather. Anything beyond is a gather of a unit that nothing needed (e.g. a forward
  // prefetch, issued while recomputing, of a unit whose backward is already done).
  const int64_t allowed_extra = strategy == Strategy::kFullShard ? kSteps * ckpt.block_elements : 0;
  EXPECT_LE(ckpt.all_gather_elements, plain.all_gather_elements + allowed_extra)
      << name << " at " << world << " ranks: all-gathered elements over " << kSteps << " steps: checkpointed "
      << ckpt.all_gather_elements << ", plain " << plain.all_gather_elements << ", allowed extra " << allowed_extra
      << " (one gather of every block: " << ckpt.block_elements << ")";

  // Units gathered again for the recomputation are freed again: nothing stays gathered.
  ASSERT_EQ(ckpt.gathered_after_step.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(ckpt.gathered_after_step[step], 0) << name << " at " << world << " ranks: after step " << step;
  }
}

}  // namespace

TEST(CheckpointSharded, FullShardGptEqualsUncheckpointed) {
  expect_checkpointing_changes_nothing(Strategy::kFullShard);
}

TEST(CheckpointSharded, OtherStrategiesGptEqualUncheckpointed) {
  for (auto strategy : {Strategy::kShardGradOp, Strategy::kNoShard}) expect_checkpointing_changes_nothing(strategy);
}

// The checkpointed forward itself, without an engine (Units then call forward directly): the
// gradients equal those of GptImpl::forward bitwise, so any difference above is the engine's.
TEST(CheckpointSharded, PlainGptGradientsEqualWithoutEngine) {
  torch::manual_seed(7);
  zs_test::Gpt model = keep_alive(zs_test::Gpt(gpt_config()));
  auto [x, y] = batch(0, 0, 1);
  auto grads = [&](bool ckpt) {
    model->zero_grad();
    gpt_loss(ckpt ? checkpointed_forward(*model, x) : model->forward(x), y).backward();
    std::vector<torch::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto plain = grads(false), ckpt = grads(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], ckpt[i])) << "parameter " << i;
}
