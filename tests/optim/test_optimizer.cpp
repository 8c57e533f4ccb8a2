// SPDX-License-Identifier: Apache-2.0
// Sharded optimizers against torch::optim: the same parameters and gradients, once as three
// odd-shaped torch parameters under torch::optim::SGD/Adam/AdamW, once as two flat shards (the
// parameters concatenated, zero-padded, split mid-parameter) under zeroshard's optimizer; compared
// element by element after every step. Plus layout checks, state accounting, factories, errors.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/optim/optimizer.h"

namespace zs = zeroshard;

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{7, 13}, {5}, {3, 4, 9}};  // 91 + 5 + 108
constexpr int64_t kNumel = 204;
constexpr int64_t kSteps = 20;

// One model twice: torch parameters, and a flat copy (plus `pad` zeros) cut into shards that are
// views of `flat`, as a rank's shards of a FlatParamGroup would be.
struct Twin {
  std::vector<torch::Tensor> ref;
  torch::Tensor flat;
  torch::Tensor flat_grad;
  std::vector<zs::ParamShard> shards;
  std::vector<int64_t> cuts;  // shard boundaries in `flat`, from 0 to its size
};

// `inner_cuts`: where `flat` is split (strictly increasing, inside (0, kNumel + pad)).
Twin make_twin(const std::vector<int64_t>& inner_cuts, int64_t pad) {
  Twin t;
  std::vector<torch::Tensor> pieces;
  for (const auto& shape : kShapes) {
    t.ref.push_back(torch::randn(shape).requires_grad_(true));
    pieces.push_back(t.ref.back().detach().flatten().clone());
  }
  pieces.push_back(torch::zeros({pad}));
  t.flat = torch::cat(pieces);
  t.cuts.push_back(0);
  t.cuts.insert(t.cuts.end(), inner_cuts.begin(), inner_cuts.end());
  t.cuts.push_back(t.flat.numel());
  for (size_t i = 0; i + 1 < t.cuts.size(); ++i) {
    t.shards.push_back({t.flat.narrow(0, t.cuts[i], t.cuts[i + 1] - t.cuts[i]), {},
                        "unit" + std::to_string(i)});
  }
  return t;
}

// Fresh random gradients, the same on both sides; zero on the padding. Parameter `skip` (if >= 0)
// gets no gradient: undefined in torch and, when the shards are one per parameter, in shard `skip`.
void set_random_grads(Twin& t, int skip = -1) {
  std::vector<torch::Tensor> pieces;
  for (size_t i = 0; i < t.ref.size(); ++i) {
    torch::Tensor g = torch::randn(t.ref[i].sizes());
    t.ref[i].mutable_grad() = static_cast<int>(i) == skip ? torch::Tensor() : g;
    pieces.push_back(g.flatten());
  }
  pieces.push_back(torch::zeros({t.flat.numel() - kNumel}));
  t.flat_grad = torch::cat(pieces);
  for (size_t i = 0; i < t.shards.size(); ++i) {
    t.shards[i].grad = static_cast<int>(i) == skip
                           ? torch::Tensor()
                           : t.flat_grad.narrow(0, t.cuts[i], t.cuts[i + 1] - t.cuts[i]);
  }
}

torch::Tensor ref_flat(const Twin& t) {
  std::vector<torch::Tensor> pieces;
  for (const auto& p : t.ref) pieces.push_back(p.detach().flatten());
  return torch::cat(pieces);
}

// max |ours - ref| / max(|ref|, 1e-8) over the parameters (padding excluded).
double max_rel_diff(const Twin& t) {
  torch::Tensor ref = ref_flat(t);
  torch::Tensor ours = t.flat.narrow(0, 0, kNumel);
  return zs::test::nan_as_inf(((ours - ref).abs() / ref.abs().clamp_min(1e-8)).max().item<double>());
}

bool padding_is_zero(const Twin& t) {
  torch::Tensor pad = t.flat.narrow(0, kNumel, t.flat.numel() - kNumel);
  return pad.numel() == 0 || pad.eq(0).all().item<bool>();
}

using RefOptimizer = std::unique_ptr<torch::optim::Optimizer>;

struct Case {
  std::string name;
  std::function<RefOptimizer(std::vector<torch::Tensor>)> ref;
  std::function<std::unique_ptr<zs::ShardedOptimizer>()> ours;
  int64_t state_floats_per_element;  // what state_bytes() should be, per element, after a step
};

// gtest prints a failing case by name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case sgd_case(std::string name, zs::SgdOptions o) {
  auto ref = [o](std::vector<torch::Tensor> params) -> RefOptimizer {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .dampening(o.dampening)
                                                           .weight_decay(o.weight_decay)
                                                           .nesterov(o.nesterov));
  };
  return {std::move(name), ref, [o] { return zs::make_sgd(o); }, o.momentum != 0 ? 1 : 0};
}

template <typename TorchOpt, typename TorchOptions>
Case adam_case(std::string name, zs::AdamOptions o) {
  constexpr bool kDecoupled = std::is_same_v<TorchOpt, torch::optim::AdamW>;
  auto ref = [o](std::vector<torch::Tensor> params) -> RefOptimizer {
    return std::make_unique<TorchOpt>(params, TorchOptions(o.lr)
                                                  .betas(std::make_tuple(o.beta1, o.beta2))
                                                  .eps(o.eps)
                                                  .weight_decay(o.weight_decay)
                                                  .amsgrad(o.amsgrad));
  };
  auto ours = [o] { return kDecoupled ? zs::make_adamw(o) : zs::make_adam(o); };
  return {std::move(name), ref, ours, o.amsgrad ? 3 : 2};
}

zs::SgdOptions sgd(double lr, double momentum, double dampening, double wd, bool nesterov) {
  zs::SgdOptions o;
  o.lr = lr;
  o.momentum = momentum;
  o.dampening = dampening;
  o.weight_decay = wd;
  o.nesterov = nesterov;
  return o;
}

zs::AdamOptions adam(double lr, double wd, bool amsgrad, double beta2 = 0.999) {
  zs::AdamOptions o;
  o.lr = lr;
  o.beta2 = beta2;
  o.weight_decay = wd;
  o.amsgrad = amsgrad;
  return o;
}

std::vector<Case> all_cases() {
  using torch::optim::Adam;
  using torch::optim::AdamOptions;
  using torch::optim::AdamW;
  using torch::optim::AdamWOptions;
  return {
      sgd_case("SgdPlain", sgd(0.1, 0, 0, 0, false)),
      sgd_case("SgdMomentum", sgd(0.05, 0.9, 0, 0, false)),
      sgd_case("SgdDampening", sgd(0.05, 0.9, 0.3, 0, false)),
      sgd_case("SgdNesterov", sgd(0.05, 0.9, 0, 0, true)),
      sgd_case("SgdWeightDecay", sgd(0.1, 0, 0, 0.1, false)),
      sgd_case("SgdNesterovWeightDecay", sgd(0.05, 0.8, 0, 0.05, true)),
      adam_case<Adam, AdamOptions>("Adam", adam(1e-2, 0, false)),
      adam_case<Adam, AdamOptions>("AdamWeightDecay", adam(1e-2, 0.1, false)),
      adam_case<Adam, AdamOptions>("AdamAmsgrad", adam(1e-2, 0, true, 0.9)),
      adam_case<Adam, AdamOptions>("AdamAmsgradWeightDecay", adam(1e-2, 0.05, true, 0.9)),
      adam_case<AdamW, AdamWOptions>("AdamW", adam(1e-2, 0.01, false)),
      adam_case<AdamW, AdamWOptions>("AdamWNoDecay", adam(1e-2, 0, false)),
      adam_case<AdamW, AdamWOptions>("AdamWAmsgrad", adam(1e-2, 0.1, true, 0.9)),
  };
}

void set_lr(torch::optim::Optimizer& ref, zs::ShardedOptimizer& ours, double lr) {
  for (auto& group : ref.param_groups()) group.options().set_lr(lr);
  ours.set_lr(lr);
}

template <typename E, typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

class OptimizerMatchesTorch : public ::testing::TestWithParam<Case> {};

// 20 steps, lr halved at step 10 (as a scheduler would), two shards split mid-parameter with a
// 5-element zero tail: every element within 1e-6 relative of torch::optim after every step, the
// padding exactly 0, the gradients untouched.
TEST_P(OptimizerMatchesTorch, TwoShardsWithPaddingFor20Steps) {
  const Case& c = GetParam();
  torch::manual_seed(1234);
  Twin t = make_twin({97}, 5);
  const torch::Tensor initial = t.flat.clone();
  RefOptimizer ref = c.ref(t.ref);
  auto ours = c.ours();
  const double lr = ours->lr();
  double worst = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) set_lr(*ref, *ours, lr / 2);
    set_random_grads(t);
    const torch::Tensor grad_before = t.flat_grad.clone();
    ref->step();
    ours->step(t.shards);
    worst = std::max(worst, max_rel_diff(t));
    EXPECT_TRUE(padding_is_zero(t)) << "step " << step;
    EXPECT_TRUE(torch::equal(t.flat_grad, grad_before)) << "step " << step << " changed a grad";
  }
  std::printf("[ max rel diff ] %s: %.3g\n", c.name.c_str(), worst);
  EXPECT_LE(worst, 1e-6) << c.name;
  EXPECT_GT((t.flat - initial).abs().max().item<double>(), 1e-3) << "parameters did not move";
  EXPECT_EQ(ours->steps(), kSteps);
  EXPECT_EQ(ours->state_bytes(), c.state_floats_per_element * 4 * t.flat.numel());
}

// One shard per parameter; parameter 1 has no gradient at steps 3-5 and parameter 0 none at
// step 0: skipped by both, state created lazily and per-shard step counts (Adam's bias
// correction) kept apart, exactly as torch::optim does.
TEST_P(OptimizerMatchesTorch, UndefinedGradSkipsTheShardLikeTorch) {
  const Case& c = GetParam();
  torch::manual_seed(99);
  Twin t = make_twin({91, 96}, 0);
  RefOptimizer ref = c.ref(t.ref);
  auto ours = c.ours();
  double worst = 0;
  for (int64_t step = 0; step < 10; ++step) {
    const int skip = step == 0 ? 0 : (step >= 3 && step <= 5 ? 1 : -1);
    set_random_grads(t, skip);
    const torch::Tensor before = skip >= 0 ? t.shards[skip].param.clone() : torch::Tensor();
    ref->step();
    ours->step(t.shards);
    if (skip >= 0) {
      EXPECT_TRUE(torch::equal(t.shards[skip].param, before)) << "step " << step;
    }
    if (step == 0) {  // shard 0 has no state yet
      EXPECT_EQ(ours->state_bytes(), c.state_floats_per_element * 4 * (kNumel - 91));
    }
    worst = std::max(worst, max_rel_diff(t));
  }
  EXPECT_LE(worst, 1e-6) << c.name;
  EXPECT_EQ(ours->state_bytes(), c.state_floats_per_element * 4 * kNumel);
}

// Parameter groups inside the shards: parameter 1 (1-D) in a group with no decay and half the
// lr, parameter 2 (which the shard cut splits) with its own decay and twice the lr, parameter 0
// with the optimizer's own options, against torch::optim with the same three param groups. The
// lr change at step 10 keeps each group's factor, as a scheduler over param groups would.
void set_weight_decay(torch::optim::OptimizerOptions& o, double wd) {
  if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(&o)) a->weight_decay(wd);
  if (auto* a = dynamic_cast<torch::optim::AdamWOptions*>(&o)) a->weight_decay(wd);
  if (auto* a = dynamic_cast<torch::optim::SGDOptions*>(&o)) a->weight_decay(wd);
}

TEST_P(OptimizerMatchesTorch, ParamGroupsInsideShardsMatchTorchParamGroups) {
  const Case& c = GetParam();
  torch::manual_seed(4321);
  Twin t = make_twin({97}, 5);
  auto ours = c.ours();
  const double lr = ours->lr();
  const double wd2 = 0.07;
  const std::vector<double> scale = {1.0, 0.5, 2.0};
  RefOptimizer ref = c.ref({t.ref[0]});
  for (int k : {1, 2}) {
    std::unique_ptr<torch::optim::OptimizerOptions> o = ref->param_groups()[0].options().clone();
    o->set_lr(lr * scale[k]);
    set_weight_decay(*o, k == 1 ? 0.0 : wd2);
    ref->add_param_group(torch::optim::OptimizerParamGroup({t.ref[k]}, std::move(o)));
  }
  // Flat layout: p0 [0, 91), p1 [91, 96), p2 [96, 204), padding [204, 209); shards [0, 97), [97, 209).
  t.shards[0].groups = {{91, 96, 0.0, 0.5}, {96, 97, wd2, 2.0}};
  t.shards[1].groups = {{0, 107, wd2, 2.0}};
  double worst = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      for (size_t k = 0; k < ref->param_groups().size(); ++k) ref->param_groups()[k].options().set_lr(lr / 2 * scale[k]);
      ours->set_lr(lr / 2);
    }
    set_random_grads(t);
    ref->step();
    ours->step(t.shards);
    worst = std::max(worst, max_rel_diff(t));
    EXPECT_TRUE(padding_is_zero(t)) << "step " << step;
  }
  std::printf("[ max rel diff ] %s with groups: %.3g\n", c.name.c_str(), worst);
  EXPECT_LE(worst, 1e-6) << c.name;
  // The groups must matter: the same steps without them end elsewhere.
  torch::manual_seed(4321);
  Twin plain = make_twin({97}, 5);
  auto ungrouped = c.ours();
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) ungrouped->set_lr(lr / 2);
    set_random_grads(plain);
    ungrouped->step(plain.shards);
  }
  EXPECT_GT(zs::test::max_abs_diff(plain.flat, t.flat), 1e-4) << c.name << ": the groups changed nothing";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerMatchesTorch, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

std::vector<std::unique_ptr<zs::ShardedOptimizer>> one_of_each() {
  std::vector<std::unique_ptr<zs::ShardedOptimizer>> v;
  v.push_back(zs::make_sgd(sgd(0.1, 0.9, 0, 0, false)));
  v.push_back(zs::make_adam(adam(1e-3, 0, true)));
  v.push_back(zs::make_adamw(adam(1e-3, 0.01, false)));
  return v;
}

TEST(ShardedOptimizer, ShardSizeChangeIsAUsageErrorNamingTheShard) {
  for (auto& opt : one_of_each()) {
    torch::Tensor p = torch::zeros({10}), g = torch::ones({10});
    opt->step({{p, g, "block.3"}});
    torch::Tensor p2 = torch::zeros({11}), g2 = torch::ones({11});
    std::string msg = error_message<zs::UsageError>([&] { opt->step({{p2, g2, "block.3"}}); });
    EXPECT_CONTAINS(msg, "'block.3'");
    EXPECT_CONTAINS(msg, "expected 10 elements");
    EXPECT_CONTAINS(msg, "got 11 elements");
    msg = error_message<zs::UsageError>([&] { opt->step({{p, g, "block.3"}, {p, g, "x"}}); });
    EXPECT_CONTAINS(msg, "got 2 shards, the first step had 1");
    EXPECT_EQ(opt->steps(), 1) << "a refused step must not count";
    opt->step({{p, g, "block.3"}});  // the original layout still works
    EXPECT_EQ(opt->steps(), 2);
  }
}

TEST(ShardedOptimizer, BadShardsAreUsageErrors) {
  for (auto& opt : one_of_each()) {
    torch::Tensor p = torch::zeros({10});
    std::string msg = error_message<zs::UsageError>(
        [&] { opt->step({{p, torch::ones({9}), "u0"}}); });
    EXPECT_CONTAINS(msg, "grad of shard 0 ('u0')");
    msg = error_message<zs::UsageError>(
        [&] { opt->step({{torch::zeros({10}, torch::kDouble), torch::ones({10}), "u1"}}); });
    EXPECT_CONTAINS(msg, "('u1') must be a defined, contiguous fp32 tensor, got Double");
    msg = error_message<zs::UsageError>(
        [&] { opt->step({{torch::zeros({4, 4}).t(), torch::ones({4, 4}), "u2"}}); });
    EXPECT_CONTAINS(msg, "non-contiguous");
    EXPECT_EQ(opt->steps(), 0);
    EXPECT_EQ(opt->state_bytes(), 0);
  }
}

TEST(ShardedOptimizer, MalformedGroupsAreUsageErrorsAndChangeNothing) {
  for (auto& opt : one_of_each()) {
    torch::Tensor p = torch::zeros({10}), g = torch::ones({10});
    zs::ParamShard s{p, g, "blocks.2", {{4, 8, 0.0, 1.0}, {6, 10, 0.0, 1.0}}};
    std::string msg = error_message<zs::UsageError>([&] { opt->step({s}); });
    EXPECT_CONTAINS(msg, "group range 1 [6, 10) of shard 'blocks.2'");
    s.groups = {{0, 11, 0.0, 1.0}};
    EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt->step({s}); }), "leaves the shard");
    s.groups = {{0, 5, -0.1, 1.0}};
    EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt->step({s}); }), "weight_decay = -0.1");
    s.groups = {{0, 5, 0.0, std::nan("")}};
    EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt->step({s}); }), "lr_scale = nan");
    EXPECT_EQ(opt->steps(), 0);
    EXPECT_TRUE(torch::equal(p, torch::zeros({10})));
  }
}

TEST(ShardedOptimizer, ShardRunsFillGapsAndMergeEqualNeighbours) {
  torch::Tensor p = torch::zeros({20});
  zs::ParamShard s{p, {}, "u", {{2, 5, 0.0, 1.0}, {5, 9, 0.0, 1.0}, {9, 12, 0.1, 1.0}, {15, 20, 0.1, 3.0}}};
  const std::vector<zs::ShardGroupRange> runs = zs::shard_runs(s, 0.1);
  const std::vector<std::vector<double>> want = {{0, 2, 0.1, 1}, {2, 9, 0, 1}, {9, 15, 0.1, 1}, {15, 20, 0.1, 3}};
  ASSERT_EQ(runs.size(), want.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].begin, want[i][0]) << i;
    EXPECT_EQ(runs[i].end, want[i][1]) << i;
    EXPECT_EQ(runs[i].weight_decay, want[i][2]) << i;
    EXPECT_EQ(runs[i].lr_scale, want[i][3]) << i;
  }
  s.groups.clear();
  ASSERT_EQ(zs::shard_runs(s, 0.3).size(), 1u);
  EXPECT_EQ(zs::shard_runs(s, 0.3)[0].end, 20);
}

TEST(ShardedOptimizer, StateBytes) {
  const int64_t n = 1000;
  struct Expect {
    std::unique_ptr<zs::ShardedOptimizer> opt;
    int64_t bytes;
  };
  std::vector<Expect> cases;
  cases.push_back({zs::make_sgd(sgd(0.1, 0, 0, 0.1, false)), 0});
  cases.push_back({zs::make_sgd(sgd(0.1, 0.9, 0, 0, true)), 4 * n});
  cases.push_back({zs::make_adam(adam(1e-3, 0, false)), 2 * 4 * n});
  cases.push_back({zs::make_adam(adam(1e-3, 0, true)), 3 * 4 * n});
  cases.push_back({zs::make_adamw(adam(1e-3, 0.01, false)), 2 * 4 * n});
  cases.push_back({zs::make_adamw(adam(1e-3, 0.01, true)), 3 * 4 * n});
  for (auto& c : cases) {
    EXPECT_EQ(c.opt->state_bytes(), 0) << c.opt->describe();
    torch::Tensor a = torch::zeros({600}), b = torch::zeros({400});
    c.opt->step({{a, torch::ones({600}), "a"}, {b, torch::ones({400}), "b"}});
    EXPECT_EQ(c.opt->state_bytes(), c.bytes) << c.opt->describe();
  }
}

TEST(ShardedOptimizer, DescribeAndSetLr) {
  auto sgd_opt = zs::make_sgd(sgd(0.1, 0.9, 0.25, 1e-4, false));
  EXPECT_EQ(sgd_opt->describe(),
            "SGD(lr=0.1, momentum=0.9, dampening=0.25, weight_decay=0.0001, nesterov=false)");
  auto adam_opt = zs::make_adam(adam(3e-4, 0, true, 0.95));
  EXPECT_EQ(adam_opt->describe(),
            "Adam(lr=0.0003, betas=(0.9, 0.95), eps=1e-08, weight_decay=0, amsgrad=true)");
  adam_opt->set_lr(0.5);
  EXPECT_EQ(adam_opt->lr(), 0.5);
  EXPECT_CONTAINS(adam_opt->describe(), "Adam(lr=0.5,");
}

TEST(ShardedOptimizer, MakeOptimizerFromDefaultOptionsIsAdamW) {
  const zs::OptimizerOptions o;
  auto opt = zs::make_optimizer(o);
  EXPECT_EQ(opt->describe(), "AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)");
  EXPECT_EQ(opt->lr(), o.lr);
}

TEST(ShardedOptimizer, MakeOptimizerMapsEveryField) {
  zs::OptimizerOptions o;
  o.type = zs::OptimizerOptions::Type::kAdam;
  o.lr = 3e-4;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  EXPECT_EQ(zs::make_optimizer(o)->describe(), "Adam(lr=0.0003, betas=(0.8, 0.95), eps=1e-06, weight_decay=0.1)");
  o = {};
  o.type = zs::OptimizerOptions::Type::kSgd;
  o.lr = 0.5;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0;
  EXPECT_EQ(zs::make_optimizer(o)->describe(), "SGD(lr=0.5, momentum=0.9, dampening=0, weight_decay=0, nesterov=true)");
}

TEST(ShardedOptimizer, BadOptionsAreClearErrors) {
  using zs::UsageError;
  EXPECT_CONTAINS(error_message<UsageError>([] { zs::make_sgd(sgd(0.1, 0, 0, 0, true)); }),
                  "SgdOptions.nesterov = true needs momentum > 0 and dampening = 0");
  EXPECT_CONTAINS(error_message<UsageError>([] { zs::make_sgd(sgd(0.1, 0.9, 0.1, 0, true)); }),
                  "dampening = 0.1");
  EXPECT_CONTAINS(error_message<UsageError>([] { zs::make_sgd(sgd(-1, 0, 0, 0, false)); }),
                  "SgdOptions.lr = -1 is out of range; allowed: [0, inf)");
  EXPECT_CONTAINS(error_message<UsageError>([] { zs::make_sgd(sgd(0.1, 0.5, 2, 0, false)); }),
                  "SgdOptions.dampening = 2 is out of range; allowed: [0, 1]");
  EXPECT_CONTAINS(error_message<UsageError>([] { zs::make_sgd(sgd(0.1, -0.5, 0, 0, false)); }),
                  "SgdOptions.momentum = -0.5");
  zs::AdamOptions o;
  o.beta1 = 1;
  EXPECT_CONTAINS(error_message<UsageError>([&] { zs::make_adam(o); }),
                  "AdamOptions.beta1 = 1 is out of range; allowed: [0, 1)");
  o = {};
  o.eps = 0;
  EXPECT_CONTAINS(error_message<UsageError>([&] { zs::make_adamw(o); }),
                  "AdamOptions.eps = 0 is out of range; allowed: (0, inf)");
  o = {};
  o.lr = std::nan("");
  EXPECT_CONTAINS(error_message<UsageError>([&] { zs::make_adamw(o); }), "AdamOptions.lr = nan");
  o = {};
  o.weight_decay = -0.1;
  EXPECT_CONTAINS(error_message<UsageError>([&] { zs::make_adam(o); }), "AdamOptions.weight_decay");
}

// make_optimizer protects itself against options no valid config gives (the config's rules are
// config/src/config_rules.cpp's): UsageErrors naming OptimizerOptions' fields.
TEST(ShardedOptimizer, BadOptimizerOptionsAreUsageErrorsNamingTheField) {
  zs::OptimizerOptions o;
  o.beta2 = 1.5;
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_optimizer(o); }),
                  "OptimizerOptions.beta2 = 1.5 is out of range; allowed: [0, 1)");
  o = {};
  o.momentum = 0.9;  // type defaults to ADAMW
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_optimizer(o); }),
                  "OptimizerOptions.momentum = 0.9 / nesterov = false apply only to type SGD, but type = ADAMW");
  o = {};
  o.type = zs::OptimizerOptions::Type::kSgd;
  o.nesterov = true;
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_optimizer(o); }),
                  "OptimizerOptions.nesterov = true needs momentum > 0");
}

}  // namespace
