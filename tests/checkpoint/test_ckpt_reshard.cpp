// SPDX-License-Identifier: Apache-2.0
// Resharding on load: a checkpoint saved at N ranks loads at M ranks directly (4 -> 2, 2 -> 4,
// 1 -> 3) and training goes on as it would have at N ranks. CTest runs the saving job first
// (fixture), which also trains on from the checkpoint and records its parameters; the loading
// job (another world size) loads, trains the same steps and must end within 1e-5 of them (not
// bitwise: a different number of ranks sums the gradients in a different order).
//
//   test_ckpt_reshard --gtest_filter=Reshard.Save   (at N ranks)  -> reshard_from<N>/
//   test_ckpt_reshard --gtest_filter=Reshard.Load --from=<N>  (at M ranks)

#include <torch/serialize.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/gpt_trainer.h"
#include "zeroshard/checkpoint/checkpoint.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {

constexpr int kSaveStep = 3, kEndStep = 6;

std::string dir_for(int world) { return (fs::current_path() / ("reshard_from" + std::to_string(world))).string(); }

int from_world() {
  const char* v = std::getenv("ZS_RESHARD_FROM");
  return v ? std::atoi(v) : 0;
}

// Parameters of the continued run, saved by rank 0 of the saving job.
void save_params(const std::map<std::string, at::Tensor>& p, const std::string& path) {
  std::vector<at::Tensor> values;
  for (const auto& [name, t] : p) values.push_back(t);
  torch::save(values, path);
}

}  // namespace

TEST(Reshard, Save) {
  const int world = zs::test::world_size();
  const std::string dir = dir_for(world);
  if (zs::test::rank() == 0) fs::remove_all(dir);
  zs::test::world()->barrier("test.reshard")->wait();
  zs_test::GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::CheckpointOptions co;
  co.dir = dir + "/ckpt";
  zs::Checkpointer ckpt(*t.engine, co);
  t.train(*opt, 0, kSaveStep);
  zs::TrainingState st;
  st.step = kSaveStep;
  ckpt.save(*opt, st);
  t.train(*opt, kSaveStep, kEndStep);
  auto p = t.params();
  if (zs::test::rank() == 0) save_params(p, dir + "/expected.pt");
}

TEST(Reshard, Load) {
  const int from = from_world();
  ASSERT_GT(from, 0) << "set ZS_RESHARD_FROM to the world size of the saving job";
  const std::string dir = dir_for(from);
  ASSERT_TRUE(fs::exists(dir + "/expected.pt")) << "run the saving job at " << from << " ranks first";
  zs_test::GptTrainer t(zs::ShardingOptions{}, /*init_seed=*/99);
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::CheckpointOptions co;
  co.dir = dir + "/ckpt";
  zs::Checkpointer ckpt(*t.engine, co);
  const zs::TrainingState st = ckpt.load(*opt);
  EXPECT_EQ(st.step, kSaveStep);
  EXPECT_EQ(st.resharded, from != zs::test::world_size());
  // The data of a step is split differently across the new ranks: draw it as the saving job did,
  // rank by rank, and give each new rank the mean of an equal share of the old ranks' batches.
  // Simplest exact equivalent: every new rank runs all old ranks' micro-batches (gradients
  // summed with weight 1/from), which is what the old job's average computed.
  for (int step = kSaveStep; step < kEndStep; ++step) {
    const zs_test::GptConfig& c = t.config;
    const int m = zs::test::world_size();
    torch::Tensor loss;
    at::Tensor total;
    // Old rank r's batch, as GptTrainer::forward_backward drew it.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
    for (int r = 0; r < from; ++r) {
      torch::manual_seed(1000 + 31 * step + r);
      torch::Tensor x = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
      torch::Tensor y = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
      batches.emplace_back(x, y);
    }
    // New rank q takes old ranks q, q + m, ...; the engine averages over m ranks, so scale each
    // rank's sum by m / from to get the old job's mean over `from` batches.
    std::vector<torch::Tensor> xl, yl;
    for (int r = zs::test::rank(); r < from; r += m) {
      xl.push_back(batches[r].first);
      yl.push_back(batches[r].second);
    }
    // A new rank without an old batch still runs the model (its collectives must match the
    // other ranks'), on batch 0 with weight 0.
    double weight = static_cast<double>(m) / from;
    if (xl.empty()) {
      xl.push_back(batches[0].first);
      yl.push_back(batches[0].second);
      weight = 0;
    }
    loss = t.engine->forward([&] {
      torch::Tensor sum;
      for (size_t i = 0; i < xl.size(); ++i) {
        torch::Tensor l = torch::cross_entropy_loss(t.model->forward(xl[i]).view({-1, c.vocab}), yl[i].view({-1}));
        sum = sum.defined() ? sum + l : l;
      }
      return sum * weight;
    });
    loss.backward();
    t.engine->clip_grad_norm(1.0);
    t.engine->step(*opt);
    t.engine->zero_grad();
  }
  auto got = t.params();
  std::vector<at::Tensor> expected;
  torch::load(expected, dir + "/expected.pt");
  size_t i = 0;
  double worst = 0;
  for (const auto& [name, tensor] : got) worst = std::max(worst, zs::test::max_abs_diff(tensor, expected.at(i++)));
  if (zs::test::rank() == 0) std::printf("  reshard %d -> %d ranks: max|diff| = %.3g\n", from, zs::test::world_size(), worst);
  EXPECT_LE(worst, 1e-5);
}
