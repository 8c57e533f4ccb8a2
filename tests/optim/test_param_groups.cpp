// SPDX-License-Identifier: Apache-2.0
// Parameter groups: how assign_param_groups classifies parameters (the 1-D / embedding exemption,
// first-match rules over names and tied names, globs across dots), the errors a rule gets, the
// options, and what the engine hands the optimizer: each rank's shard ranges for a wrapped
// model. Optimizer math with groups is checked against torch::optim in test_optimizer, and whole
// training in test_equivalence.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/optim/param_groups.h"

namespace zs = zeroshard;

namespace {

std::vector<zs::ParamGroupParam> gpt_like() {
  return {
      {"wte.weight", {"lm_head_weight"}, 2, 40, true},
      {"h0.ln1.weight", {}, 1, 4, false},
      {"h0.qkv.weight", {}, 2, 48, false},
      {"h0.proj.bias", {}, 1, 4, false},
      {"h1.fc.weight", {}, 2, 64, false},
      {"h1.fc.bias", {}, 1, 16, false},
  };
}

std::string usage_error(const zs::ParamGroupOptions& o, const std::vector<zs::ParamGroupParam>& params) {
  return zs::test::error_text_of<zs::UsageError>([&] { zs::assign_param_groups(o, params); });
}

TEST(ParamGroups, DefaultsExemptOneDimensionalAndEmbeddings) {
  zs::ParamGroupOptions o;
  o.weight_decay = 0.1;
  const auto g = zs::assign_param_groups(o, gpt_like());
  ASSERT_EQ(g.size(), 6u);
  const std::vector<double> want = {0, 0, 0.1, 0, 0.1, 0};
  const std::vector<std::string> why = {"embedding", "1-D", "default", "1-D", "default", "1-D"};
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].weight_decay, want[i]) << g[i].name;
    EXPECT_EQ(g[i].lr_scale, 1.0) << g[i].name;
    EXPECT_EQ(g[i].why, why[i]) << g[i].name;
  }
  EXPECT_EQ(zs::describe_param_groups(g),
            "weight_decay 0 on 4 tensors (64 elements); weight_decay 0.1 on 2 tensors (112 elements)");
  o.no_decay_1d_and_embeddings = false;
  for (const auto& a : zs::assign_param_groups(o, gpt_like())) EXPECT_EQ(a.weight_decay, 0.1) << a.name;
}

TEST(ParamGroups, FirstMatchingRuleWinsOverTheExemptionAndMatchesTiedNames) {
  zs::ParamGroupOptions o;
  o.weight_decay = 0.1;
  o.rules.push_back({"h1.*", std::nullopt, 2.0});     // '*' crosses dots; decay: the default 0.1
  o.rules.push_back({"h?.fc.bias", 0.5, 1.0});        // shadowed for h1.fc.bias by the rule above
  o.rules.push_back({"lm_head_*", 0.01, 1.0});        // the tied name of wte.weight
  o.rules.push_back({"h0.[pq]*.weight", 0.2, 3.0});   // a set
  // Rule 1 only matches what rule 0 took: an error, tested below; drop it here.
  zs::ParamGroupOptions ok = o;
  ok.rules.erase(ok.rules.begin() + 1);
  const auto g = zs::assign_param_groups(ok, gpt_like());
  EXPECT_EQ(g[0].weight_decay, 0.01);
  EXPECT_EQ(g[0].why, "rules[1] ('lm_head_*')");
  EXPECT_EQ(g[2].weight_decay, 0.2);
  EXPECT_EQ(g[2].lr_scale, 3.0);
  EXPECT_EQ(g[3].weight_decay, 0.0) << "h0.proj.bias is 1-D and matches no rule";
  EXPECT_EQ(g[4].weight_decay, 0.1);
  EXPECT_EQ(g[4].lr_scale, 2.0);
  EXPECT_EQ(g[5].weight_decay, 0.1) << "a rule overrides the 1-D exemption";
  EXPECT_EQ(g[5].lr_scale, 2.0);
  const std::string err = usage_error(o, gpt_like());
  EXPECT_TRUE(zs::test::contains(err, "parameter group rule rules[1] ('h?.fc.bias') matches only parameters an "
                                      "earlier rule already took"))
      << err;
  // A rule's label (resolve() gives "optimizer.param_groups[i]") names it in reports and errors.
  ok.rules[0].label = "optimizer.param_groups[0]";
  EXPECT_EQ(zs::assign_param_groups(ok, gpt_like())[4].why, "optimizer.param_groups[0] ('h1.*')");
}

TEST(ParamGroups, BadRulesAreUsageErrorsNamingTheRule) {
  zs::ParamGroupOptions o;
  o.rules.push_back({"blocks.*", std::nullopt, 1.0, "optimizer.param_groups[0]"});
  std::string err = usage_error(o, gpt_like());
  EXPECT_TRUE(zs::test::contains(err, "parameter group rule optimizer.param_groups[0] ('blocks.*') matches no "
                                      "trainable parameter") &&
              zs::test::contains(err, "'wte.weight'"))
      << err;
  o.rules = {{"", std::nullopt, 1.0}};
  EXPECT_TRUE(zs::test::contains(usage_error(o, gpt_like()), "parameter group rule rules[0]: match is empty"));
  o.rules = {{"h1.*", -0.5, 1.0}};
  EXPECT_TRUE(zs::test::contains(usage_error(o, gpt_like()), "weight_decay = -0.5"));
  o.rules = {{"h1.*", std::nullopt, std::nan("")}};
  EXPECT_TRUE(zs::test::contains(usage_error(o, gpt_like()), "lr_scale = nan"));
}

// The engine's ranges: on every rank, the shard elements of each parameter carry its group.
// Checked by writing each parameter's index into a model, wrapping it and reading the shards.
TEST(ParamGroups, EngineHandsEachShardItsParametersRanges) {
  zs_test::GptConfig cfg;
  cfg.vocab = 11, cfg.dim = 8, cfg.heads = 2, cfg.layers = 2, cfg.seq = 4;
  torch::manual_seed(3);
  zs_test::Gpt model(cfg);
  std::vector<std::string> names;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_parameters()) {
      bool tied = false;
      for (const auto& n : names) tied = tied || model->named_parameters()[n].is_same(item.value());
      if (tied) continue;
      item.value().fill_(static_cast<double>(names.size() + 1));  // 0 is left for the padding
      names.push_back(item.key());
    }
  }
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), zs::ShardingOptions{});
  EXPECT_TRUE(engine.param_groups().empty());
  for (const auto& s : engine.param_shards()) EXPECT_TRUE(s.groups.empty());
  zs::ParamGroupOptions o;
  o.weight_decay = 0.1;
  o.rules.push_back({"h1.*", 0.05, 4.0});
  engine.set_param_groups(o);
  std::map<std::string, zs::ParamGroupAssignment> by_name;
  for (const auto& a : engine.param_groups()) by_name[a.name] = a;

  EXPECT_EQ(by_name.size(), names.size());
  for (const auto& n : names) EXPECT_TRUE(by_name.count(n)) << n << " has no assignment";
  int64_t checked = 0;
  for (const auto& s : engine.param_shards()) {
    for (const auto& r : zs::shard_runs(s, 0.1)) {
      for (int64_t i = r.begin; i < r.end; ++i) {
        const auto v = static_cast<size_t>(s.param[i].item<double>());
        if (v == 0) continue;  // padding
        ASSERT_LE(v, names.size()) << s.name << "[" << i << "] = " << v;
        if (!by_name.count(names[v - 1])) continue;  // reported above
        const auto& a = by_name.at(names[v - 1]);
        EXPECT_EQ(r.weight_decay, a.weight_decay) << s.name << "[" << i << "] of " << a.name;
        EXPECT_EQ(r.lr_scale, a.lr_scale) << s.name << "[" << i << "] of " << a.name;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(by_name.at("h1.fc.weight").lr_scale, 4.0);
  // The tied embedding goes by the root's own name for it (listed first); wte.weight is its alias.
  EXPECT_EQ(by_name.at("lm_head_weight").why, "embedding") << "found through its alias wte.weight";
  EXPECT_EQ(by_name.at("h0.ln1.weight").why, "1-D");
}

}  // namespace
