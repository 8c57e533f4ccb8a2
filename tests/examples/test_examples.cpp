// SPDX-License-Identifier: Apache-2.0
// The training examples and the training library's small pieces: the shipped configs are valid,
// the GPT's parameter count formula matches the model it builds (so the 1B config really is 1.21B
// parameters), the batch arithmetic refuses what does not divide, the flags parse.

#include <ATen/ops/allclose.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>

#include <filesystem>
#include <limits>
#include <string>
#include <unordered_set>

#include "common/test_util.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
namespace ex = zeroshard::models;
namespace fs = std::filesystem;

namespace {

std::string config_dir() { return std::string(ZS_SOURCE_DIR) + "/examples/configs"; }

TEST(ExampleConfigs, EveryShippedConfigLoadsAndValidates) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(config_dir())) {
    SCOPED_TRACE(e.path().string());
    zs::Config cfg;
    ASSERT_NO_THROW(cfg = zs::load_config_file(e.path().string()));
    EXPECT_NO_THROW(zs::validate_config(cfg));
    ++n;
  }
  EXPECT_GE(n, 5) << "gpt_tiny, gpt_demo, gpt_1b, fashion_mnist, fashion_mnist_tiny";
}

TEST(ExampleConfigs, DemoUsesFullShardAndCheckpointing) {
  zs::Config cfg = zs::load_config_file(config_dir() + "/gpt_demo.textproto");
  EXPECT_EQ(cfg.sharding().strategy(), zs::config::ShardingConfig::FULL_SHARD);
  EXPECT_TRUE(cfg.activation_checkpointing().enabled());
  EXPECT_EQ(cfg.scheduler().total_steps(), cfg.train().steps()) << "the cosine ends with training";
}

int64_t count_params(torch::nn::Module& m) {
  std::unordered_set<const void*> seen;  // the tied output layer is the embedding's tensor
  int64_t n = 0;
  for (const auto& p : m.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

TEST(GptModel, ParameterCountFormulaMatchesTheModel) {
  for (const std::string name : {"gpt_tiny", "gpt_demo"}) {
    SCOPED_TRACE(name);
    zs::Config cfg = zs::load_config_file(config_dir() + "/" + name + ".textproto");
    ex::GptOptions o = zs::resolve(cfg).model;
    ex::Gpt model(o);
    EXPECT_EQ(count_params(*model), o.num_params());
    EXPECT_EQ(model->blocks.size(), static_cast<size_t>(cfg.model().n_layer()));
    // The output layer is tied to the token embedding: one tensor under two names.
    auto named = model->named_parameters();
    EXPECT_TRUE(named["lm_head_weight"].is_same(named["wte.weight"]));
  }
  zs::Config big = zs::load_config_file(config_dir() + "/gpt_1b.textproto");
  const int64_t n = zs::resolve(big).model.num_params();
  EXPECT_EQ(n, 1211076608) << "the 1B config's size as documented in it";
}

TEST(GptModel, ForwardShapesAndContextLimit) {
  ex::GptOptions o;
  o.vocab_size = 320, o.d_model = 32, o.n_head = 4, o.n_layer = 2, o.seq_len = 16;
  ex::Gpt model(o);
  at::Tensor idx = at::randint(256, {3, 16}, at::kLong);
  EXPECT_EQ(model->forward(idx).sizes(), (std::vector<int64_t>{3, 16, 320}));
  // Causal: the logits at position t do not depend on later tokens.
  model->eval();
  at::Tensor changed = idx.clone();
  changed.index_put_({0, 15}, (idx[0][15].item<int64_t>() + 1) % 256);
  EXPECT_TRUE(at::allclose(model->forward(idx)[0].narrow(0, 0, 15), model->forward(changed)[0].narrow(0, 0, 15)));
  EXPECT_THROW(model->forward(at::zeros({1, 17}, at::kLong)), zs::UsageError);
}

TEST(BatchPlan, GlobalBatchMustDivide) {
  zs::TrainOptions o;
  o.batch_size = 32;
  o.micro_batches = 2;
  zs::BatchPlan p = zs::plan_batches(o, 4);
  EXPECT_EQ(p.micro_batch_size, 4);
  EXPECT_EQ(p.micro_batches, 2);
  try {
    zs::plan_batches(o, 3);
    FAIL() << "32 is not a multiple of 3 x 2";
  } catch (const zs::ConfigError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("train.batch_size = 32"), std::string::npos) << w;
    EXPECT_NE(w.find("multiple of ranks (3) x train.micro_batches (2) = 6"), std::string::npos) << w;
    EXPECT_NE(w.find("e.g. train.batch_size=30"), std::string::npos) << w;
  }
}

TEST(TrainFlags, ParsesFlagsAndRejectsUnknownOnes) {
  zs::TrainFlags a = zs::parse_train_flags({"prog", "--metrics-out", "m.jsonl", "--check-loss-decreases"}, "usage");
  EXPECT_EQ(a.metrics_out, "m.jsonl");
  EXPECT_TRUE(a.check_loss_decreases);
  EXPECT_EQ(zs::parse_train_flags({"prog", "--metrics-out=m2.jsonl"}, "usage").metrics_out, "m2.jsonl");
  EXPECT_THROW(zs::parse_train_flags({"prog", "--min-accuracy", "0.9"}, "usage"), zs::UsageError)
      << "only programs that declare --min-accuracy take it";
  const std::vector<zs::ProgramFlag> flags = {{"--min-accuracy", true, "X"}};
  EXPECT_EQ(zs::parse_train_flags({"prog", "--min-accuracy", "0.9"}, "usage", flags).program.at("--min-accuracy"),
            "0.9");
  EXPECT_THROW(zs::parse_train_flags({"prog", "--metrics-out"}, "usage"), zs::UsageError);
  EXPECT_THROW(zs::parse_train_flags({"prog", "--resume=yes"}, "usage"), zs::UsageError);
  EXPECT_TRUE(zs::parse_train_flags({"prog", "--resume"}, "usage").resume);
  EXPECT_FALSE(zs::parse_train_flags({"prog"}, "usage").resume);
  EXPECT_EQ(zs::parse_train_flags({"prog", "--tensorboard", "tb"}, "usage").tensorboard, "tb");
  EXPECT_TRUE(zs::parse_train_flags({"prog", "--help"}, "usage").help);
  EXPECT_TRUE(zs::parse_train_flags({"prog", "--version"}, "usage").version);
}

// Program flags are checked as their type says, in the shape every zeroshard program uses.
TEST(TrainFlags, ProgramFlagsAreTyped) {
  using T = zs::ProgramFlag::Type;
  const std::vector<zs::ProgramFlag> flags = {{"--min-accuracy", true, "X", "accuracy", T::kNumber, 0, 1},
                                              {"--epochs-max", true, "N", "epochs", T::kInteger, 1},
                                              {"--verbose", false, "", "talk"}};
  auto error = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    try {
      zs::parse_train_flags(args, "usage", flags);
    } catch (const zs::UsageError& e) {
      return e.message();
    }
    return std::string();
  };
  EXPECT_NE(error({"--min-accuracy", "lots"}).find("--min-accuracy 'lots' is not a number"), std::string::npos);
  EXPECT_NE(error({"--min-accuracy=1.5"}).find("--min-accuracy must be between 0 and 1, got 1.5"), std::string::npos);
  EXPECT_NE(error({"--epochs-max", "3x"}).find("--epochs-max '3x' is not an integer"), std::string::npos);
  EXPECT_NE(error({"--epochs-max", "0"}).find("--epochs-max must be at least 1, got 0"), std::string::npos);
  EXPECT_NE(error({"--verbose=1"}).find("--verbose takes no value"), std::string::npos);
  EXPECT_NE(error({"--metrics-ot", "f"}).find("did you mean '--metrics-out'?"), std::string::npos);
  const zs::TrainFlags f = zs::parse_train_flags({"prog", "--verbose", "--epochs-max=4"}, "usage", flags);
  EXPECT_EQ(f.program.at("--verbose"), "");
  EXPECT_EQ(f.program.at("--epochs-max"), "4");
  const std::string help = zs::train_flags_help("prog", "Trains things.", flags);
  for (const char* part : {"Trains things.", "mpirun -n N prog [OPTIONS]", "--min-accuracy X", "--verbose",
                           "--tensorboard DIR", "--config FILE"}) {
    EXPECT_NE(help.find(part), std::string::npos) << part << " in:\n" << help;
  }
}

}  // namespace
