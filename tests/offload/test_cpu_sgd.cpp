// SPDX-License-Identifier: Apache-2.0
// FusedCpuSgd against torch::optim::SGD: for every SIMD path this CPU has (the others skip
// visibly), plain SGD, L2 weight decay, momentum, dampening and Nesterov, 20 steps on shards of 1,
// 7 and 1000003 elements (one shard without a grad at some steps, so its momentum buffer starts
// late, and an lr change half-way), compared element by element (max relative diff and the count
// of elements not bitwise equal printed). Plus the fused bf16/fp16 copy against Tensor::to() bit
// for bit, bad options and shards, and make_cpu_optimizer against make_optimizer on the same options.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/offload/cpu_adam.h"
#include "zeroshard/offload/cpu_optimizer.h"
#include "zeroshard/offload/cpu_sgd.h"

namespace zs = zeroshard;

namespace {

const std::vector<int64_t> kSizes = {1, 7, 1000003};
constexpr int kSteps = 20;

// The message of the `Err` that fn throws; a failure (and "") if it throws nothing.
template <class Err>
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Err& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// max over elements of |a - b| / max(|b|, floor): relative, except that values near 0 (results of
// cancellation, whose rounding error scales with the operands, not the result) count absolutely.
double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-3) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return zs::test::nan_as_inf(((a64 - b64).abs() / b64.abs().clamp_min(floor)).max().item<double>());
}

void skip_unless_supported(zs::SimdPath path) {
  if (!zs::simd_supported(path)) {
    GTEST_SKIP() << "this CPU cannot run the " << zs::to_string(path)
                 << " path (CPU has: " << zs::cpu_simd_flags() << ")";
  }
}

struct SgdCase {
  const char* name;
  double momentum, dampening, weight_decay;
  bool nesterov;
};

const SgdCase kCases[] = {
    {"Plain", 0, 0, 0, false},          {"Wd", 0, 0, 0.01, false},
    {"MomentumWd", 0.9, 0, 0.01, false}, {"Dampening", 0.9, 0.1, 0, false},
    {"NesterovWd", 0.9, 0, 0.01, true},
};

struct PathCase {
  zs::SimdPath path;
  SgdCase sgd;
};

std::string case_name(const testing::TestParamInfo<PathCase>& info) {
  return std::string(zs::to_string(info.param.path)) + "_" + info.param.sgd.name;
}

// zeroshard's options for a case, at learning rate `lr`.
zs::SgdOptions sgd_options(const SgdCase& c, double lr) {
  zs::SgdOptions o;
  o.lr = lr;
  o.momentum = c.momentum;
  o.dampening = c.dampening;
  o.weight_decay = c.weight_decay;
  o.nesterov = c.nesterov;
  return o;
}

class CpuSgdVsTorch : public testing::TestWithParam<PathCase> {};

TEST_P(CpuSgdVsTorch, TwentyStepsMatchTorchOptim) {
  const PathCase c = GetParam();
  skip_unless_supported(c.path);
  if (testing::Test::IsSkipped()) return;
  torch::manual_seed(7);
  const double lr = 1e-2, lr2 = 3e-3;

  std::vector<torch::Tensor> ref;
  std::vector<zs::ParamShard> shards;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    torch::Tensor p = torch::randn({kSizes[i]});
    ref.push_back(p.clone().requires_grad_(true));
    shards.push_back({p.clone(), {}, "shard" + std::to_string(i)});
  }
  torch::optim::SGD torch_opt(ref, torch::optim::SGDOptions(lr)
                                       .momentum(c.sgd.momentum)
                                       .dampening(c.sgd.dampening)
                                       .weight_decay(c.sgd.weight_decay)
                                       .nesterov(c.sgd.nesterov));
  zs::FusedCpuSgd ours(sgd_options(c.sgd, lr));
  ours.set_path(c.path);
  ASSERT_EQ(ours.path(), c.path);

  double worst = 0;
  int64_t differing = 0, compared = 0;  // element-steps not bitwise equal to torch, of all
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      static_cast<torch::optim::SGDOptions&>(torch_opt.param_groups()[0].options()).lr(lr2);
      ours.set_lr(lr2);
    }
    for (size_t i = 0; i < kSizes.size(); ++i) {
      // Shard 1 has no grad at steps 0 and 5: its momentum buffer starts at step 1, and it skips.
      if (i == 1 && (step == 0 || step == 5)) {
        ref[i].mutable_grad() = torch::Tensor();
        shards[i].grad = torch::Tensor();
        continue;
      }
      torch::Tensor g = torch::randn({kSizes[i]}) * (step % 3 == 0 ? 1e-3 : 1.0);
      ref[i].mutable_grad() = g.clone();
      shards[i].grad = g.clone();
    }
    torch_opt.step();
    ours.step(shards);
    for (size_t i = 0; i < kSizes.size(); ++i) {
      const torch::Tensor expect = ref[i].detach();
      worst = std::max(worst, max_rel_diff(shards[i].param, expect));
      differing += (shards[i].param != expect).sum().item<int64_t>();
      compared += expect.numel();
    }
  }
  std::printf("[ %s ] path=%s, %d steps: max rel diff %.3g, element-steps not bitwise equal: %lld of %lld\n",
              case_name({c, 0}).c_str(), zs::to_string(ours.path()), kSteps, worst,
              static_cast<long long>(differing), static_cast<long long>(compared));
  EXPECT_LE(worst, 1e-6);
  EXPECT_EQ(ours.steps(), kSteps);
  EXPECT_EQ(ours.state_bytes(), c.sgd.momentum == 0 ? 0 : 4 * (1 + 7 + 1000003));
}

// One shard in three parameter groups (own decay and twice the lr; no decay and a tenth of it)
// against torch::optim::SGD over the three slices as three param groups.
TEST_P(CpuSgdVsTorch, GroupsInsideAShardMatchTorchParamGroups) {
  const PathCase c = GetParam();
  skip_unless_supported(c.path);
  if (testing::Test::IsSkipped()) return;
  torch::manual_seed(8);
  const double lr = 1e-2;
  const std::vector<int64_t> cut = {0, 30001, 70003, 100003};
  const std::vector<double> wd = {c.sgd.weight_decay, 0.2, 0.0}, scale = {1.0, 2.0, 0.1};
  zs::ParamShard shard{torch::randn({cut.back()}), {}, "unit",
                       {{cut[1], cut[2], wd[1], scale[1]}, {cut[2], cut[3], wd[2], scale[2]}}};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<torch::Tensor> ref;
  for (size_t k = 0; k < 3; ++k) {
    ref.push_back(shard.param.narrow(0, cut[k], cut[k + 1] - cut[k]).clone().requires_grad_(true));
    groups.emplace_back(std::vector<torch::Tensor>{ref.back()},
                        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr * scale[k])
                                                                      .momentum(c.sgd.momentum)
                                                                      .dampening(c.sgd.dampening)
                                                                      .weight_decay(wd[k])
                                                                      .nesterov(c.sgd.nesterov)));
  }
  torch::optim::SGD torch_opt(std::move(groups), torch::optim::SGDOptions(lr));
  zs::FusedCpuSgd ours(sgd_options(c.sgd, lr));
  ours.set_path(c.path);
  double worst = 0;
  for (int step = 0; step < 10; ++step) {
    shard.grad = torch::randn({cut.back()});
    for (size_t k = 0; k < 3; ++k) ref[k].mutable_grad() = shard.grad.narrow(0, cut[k], cut[k + 1] - cut[k]).clone();
    torch_opt.step();
    ours.step({shard});
    for (size_t k = 0; k < 3; ++k) {
      worst = std::max(worst, max_rel_diff(shard.param.narrow(0, cut[k], cut[k + 1] - cut[k]), ref[k].detach()));
    }
  }
  std::printf("[ %s with groups ] max rel diff %.3g\n", case_name({c, 0}).c_str(), worst);
  EXPECT_LE(worst, 1e-6);
}

std::vector<PathCase> all_cases() {
  std::vector<PathCase> cases;
  for (zs::SimdPath p : {zs::SimdPath::kScalar, zs::SimdPath::kAvx2, zs::SimdPath::kAvx512}) {
    for (const SgdCase& s : kCases) cases.push_back({p, s});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuSgdVsTorch, testing::ValuesIn(all_cases()), case_name);

// ---- the fused low-precision copy ----

class CpuSgdCopy : public testing::TestWithParam<zs::SimdPath> {};

// With lr = 0 the params keep crafted values (ties, overflow, subnormals, inf) that exercise every
// rounding case of the conversion; then ordinary updated values (with momentum) over three steps.
TEST_P(CpuSgdCopy, FusedCopyEqualsTensorTo) {
  const zs::SimdPath path = GetParam();
  skip_unless_supported(path);
  if (testing::Test::IsSkipped()) return;
  const std::vector<uint32_t> bits = {
      0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  // bf16 ties to even (down, up), near ties
      0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,  // max finite (rounds to inf), infinities
      0x00000001, 0x80400000, 0x38800000, 0x33800000,  // subnormals; fp16 min normal; fp16 tie to 0
      0x477FF000, 0x47800000, 0x3F801000, 0x3F803000,  // 65520 (fp16 -> inf), 65536, fp16 ties
      0x3F800000, 0xBF800000, 0x40490FDB, 0x3DCCCCCD}; // 1, -1, pi, 0.1
  torch::Tensor crafted = torch::empty({static_cast<int64_t>(bits.size())});
  std::memcpy(crafted.data_ptr<float>(), bits.data(), bits.size() * 4);
  torch::Tensor random = torch::randn({1000003}) * 100;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    for (double lr : {0.0, 1e-2}) {
      zs::SgdOptions o;
      o.lr = lr;
      o.momentum = 0.9;
      zs::FusedCpuSgd opt(o);
      opt.set_path(path);
      std::vector<zs::ParamShard> shards = {{crafted.clone(), torch::randn({crafted.numel()}), "crafted"},
                                            {random.clone(), torch::randn({random.numel()}), "random"},
                                            {torch::randn({7}), {}, "no_grad"}};
      std::vector<torch::Tensor> lp;
      for (const auto& s : shards) lp.push_back(torch::empty({s.param.numel()}, dtype));
      for (int step = 0; step < 3; ++step) {
        opt.step_with_copy(shards, lp);
        for (size_t i = 0; i < shards.size(); ++i) {
          const torch::Tensor expect = shards[i].param.to(dtype);
          const int64_t mismatches =
              (lp[i].view(torch::kShort) != expect.view(torch::kShort)).sum().item<int64_t>();
          EXPECT_EQ(mismatches, 0) << zs::to_string(path) << " " << dtype << " lr=" << lr
                                   << " shard " << shards[i].name << " step " << step;
        }
      }
      if (lr == 0) EXPECT_TRUE(torch::equal(shards[0].param, crafted)) << "lr = 0 must keep params";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuSgdCopy,
                         testing::Values(zs::SimdPath::kScalar, zs::SimdPath::kAvx2, zs::SimdPath::kAvx512),
                         [](const testing::TestParamInfo<zs::SimdPath>& i) { return zs::to_string(i.param); });

// ---- options, shards, describe ----

zs::SgdOptions sgd(double lr, double momentum, double dampening, double wd, bool nesterov) {
  zs::SgdOptions o;
  o.lr = lr;
  o.momentum = momentum;
  o.dampening = dampening;
  o.weight_decay = wd;
  o.nesterov = nesterov;
  return o;
}

TEST(CpuSgd, BadOptionsAreErrors) {
  using zs::UsageError;
  auto make = [](const zs::SgdOptions& o) { return [o] { zs::FusedCpuSgd opt(o); }; };
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(-1, 0, 0, 0, false))),
                  "SgdOptions.lr = -1 is out of range; allowed: [0, inf)");
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(0.1, -0.5, 0, 0, false))), "SgdOptions.momentum = -0.5");
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(0.1, 0.5, 2, 0, false))),
                  "SgdOptions.dampening = 2 is out of range; allowed: [0, 1]");
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(0.1, 0, 0, NAN, false))), "SgdOptions.weight_decay = nan");
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(0.1, 0, 0, 0, true))),
                  "SgdOptions.nesterov = true needs momentum > 0 and dampening = 0");
  EXPECT_CONTAINS(error_message<UsageError>(make(sgd(0.1, 0.9, 0.1, 0, true))), "dampening = 0.1");
}

TEST(CpuSgd, BadShardsAreErrorsAndChangeNothing) {
  zs::FusedCpuSgd opt(sgd(0.1, 0.9, 0, 0, false));
  std::vector<zs::ParamShard> shards = {{torch::ones({5}), torch::ones({5}), "a"},
                                        {torch::ones({3}), torch::ones({3}), "b"}};
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt.step({{torch::ones({5}, torch::kDouble), {}, "d"}}); }),
                  "FusedCpuSgd step: shard 0 ('d') must be a defined, contiguous fp32 CPU tensor, got Double");
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt.step({{torch::ones({4}), torch::ones({5}), "g"}}); }),
                  "grad of shard 0 ('g')");
  EXPECT_CONTAINS(error_message<zs::UsageError>(
                      [&] { opt.step_with_copy(shards, {torch::Tensor(), torch::empty({4}, torch::kHalf)}); }),
                  "output 1 (shard 'b')");
  EXPECT_TRUE(torch::equal(shards[0].param, torch::ones({5})));
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_EQ(opt.state_bytes(), 0);

  opt.step(shards);
  EXPECT_EQ(opt.state_bytes(), 4 * (5 + 3));
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt.step({shards[0]}); }),
                  "FusedCpuSgd step 2 got 1 shards, the first step had 2");
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt.step({shards[0], {torch::ones({4}), {}, "b"}}); }),
                  "shard 1 ('b') changed: expected 3 elements (as at the first step), got 4");
  EXPECT_EQ(opt.steps(), 1);
}

TEST(CpuSgd, DescribeAndForcedPath) {
  zs::FusedCpuSgd opt(sgd(0.5, 0.9, 0, 0.01, true));
  EXPECT_EQ(opt.path(), zs::detect_simd());
  opt.set_path(zs::SimdPath::kScalar);
  EXPECT_EQ(opt.describe(),
            "FusedCpuSgd(lr=0.5, momentum=0.9, dampening=0, weight_decay=0.01, nesterov=true, simd=scalar)");
  if (!zs::simd_supported(zs::SimdPath::kAvx512)) {
    EXPECT_CONTAINS(error_message<zs::UsageError>([&] { opt.set_path(zs::SimdPath::kAvx512); }),
                    "FusedCpuSgd::set_path(avx512): this CPU cannot run it");
  }
}

// ---- make_cpu_optimizer ----

// One step of the fused optimizer from `cfg` and of make_optimizer(cfg) on the same inputs: equal
// bit for bit (so every field reached the fused optimizer), after checking the type built.
template <class Expected>
void expect_same_as_make_optimizer(const zs::OptimizerOptions& cfg, const std::string& describe) {
  std::unique_ptr<zs::FusedCpuOptimizer> fused = zs::make_cpu_optimizer(cfg);
  ASSERT_NE(dynamic_cast<Expected*>(fused.get()), nullptr) << fused->describe();
  EXPECT_EQ(fused->describe(), describe);
  EXPECT_EQ(fused->path(), zs::detect_simd());
  std::unique_ptr<zs::ShardedOptimizer> plain = zs::make_optimizer(cfg);
  torch::manual_seed(3);
  const torch::Tensor p = torch::randn({1000}), g1 = torch::randn({1000}), g2 = torch::randn({1000});
  std::vector<zs::ParamShard> a = {{p.clone(), g1, "s"}}, b = {{p.clone(), g1, "s"}};
  for (const torch::Tensor& g : {g1, g2}) {
    a[0].grad = g;
    b[0].grad = g;
    fused->step(a);
    plain->step(b);
  }
  EXPECT_GT(max_rel_diff(a[0].param, p), 0) << "the step changed nothing";
  EXPECT_LE(max_rel_diff(a[0].param, b[0].param), 1e-6) << describe;
  EXPECT_EQ(fused->state_bytes(), plain->state_bytes()) << describe;
}

TEST(MakeCpuOptimizer, EachTypeWithEveryField) {
  zs::OptimizerOptions cfg;
  cfg.type = zs::OptimizerOptions::Type::kAdam;
  cfg.lr = 3e-4;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  const std::string simd = zs::to_string(zs::detect_simd());
  expect_same_as_make_optimizer<zs::FusedCpuAdam>(
      cfg, "FusedCpuAdam(lr=0.0003, betas=(0.8, 0.95), eps=1e-06, weight_decay=0.1, simd=" + simd + ")");
  cfg.type = zs::OptimizerOptions::Type::kAdamW;
  expect_same_as_make_optimizer<zs::FusedCpuAdam>(
      cfg, "FusedCpuAdamW(lr=0.0003, betas=(0.8, 0.95), eps=1e-06, weight_decay=0.1, simd=" + simd + ")");
  cfg = {};
  cfg.type = zs::OptimizerOptions::Type::kSgd;
  cfg.lr = 0.5;
  cfg.momentum = 0.9;
  cfg.nesterov = true;
  cfg.weight_decay = 0.02;
  expect_same_as_make_optimizer<zs::FusedCpuSgd>(
      cfg, "FusedCpuSgd(lr=0.5, momentum=0.9, dampening=0, weight_decay=0.02, nesterov=true, simd=" + simd + ")");
  // The default options (ADAMW) too.
  expect_same_as_make_optimizer<zs::FusedCpuAdam>(
      zs::OptimizerOptions(),
      "FusedCpuAdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, simd=" + simd + ")");
}

TEST(MakeCpuOptimizer, BadOptionsAreUsageErrorsNamingTheField) {
  zs::OptimizerOptions cfg;
  cfg.beta2 = 1.5;
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_cpu_optimizer(cfg); }),
                  "OptimizerOptions.beta2 = 1.5 is out of range; allowed: [0, 1)");
  cfg = {};
  cfg.momentum = 0.9;  // type defaults to ADAMW
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_cpu_optimizer(cfg); }),
                  "apply only to type SGD, but type = ADAMW");
  cfg = {};
  cfg.type = zs::OptimizerOptions::Type::kSgd;
  cfg.nesterov = true;
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { zs::make_cpu_optimizer(cfg); }),
                  "OptimizerOptions.nesterov = true needs momentum > 0");
}

}  // namespace
