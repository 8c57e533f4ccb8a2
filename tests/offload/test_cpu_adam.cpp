// SPDX-License-Identifier: Apache-2.0
// FusedCpuAdam against torch::optim::Adam/AdamW: for every SIMD path this CPU has (the others skip
// visibly), Adam and AdamW, with and without weight decay, 20 steps on shards of 1, 7 and 1000003
// elements, compared element by element (max relative diff printed). Plus the fused bf16/fp16
// copy against Tensor::to() bit for bit, forced unsupported paths, and bad options.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/offload/cpu_adam.h"

namespace zs = zeroshard;

namespace {

const std::vector<int64_t> kSizes = {1, 7, 1000003};
constexpr int kSteps = 20;

// Fails unless fn throws a zeroshard UsageError whose message contains every one of `parts`.
void expect_usage_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << parts.front() << "'";
  } catch (const zs::UsageError& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    }
  }
}

// Sets ZS_CPU_SIMD_MAX for one scope.
class ScopedSimdCap {
 public:
  explicit ScopedSimdCap(const char* value) {
    const char* old = std::getenv("ZS_CPU_SIMD_MAX");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("ZS_CPU_SIMD_MAX", value, 1);
  }
  ~ScopedSimdCap() {
    if (had_) {
      setenv("ZS_CPU_SIMD_MAX", old_.c_str(), 1);
    } else {
      unsetenv("ZS_CPU_SIMD_MAX");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

// max over elements of |a - b| / max(|b|, floor): relative, except that values near 0 (results of
// cancellation, whose rounding error scales with the operands, not the result) count absolutely.
double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-3) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return zs::test::nan_as_inf(((a64 - b64).abs() / b64.abs().clamp_min(floor)).max().item<double>());
}

struct PathCase {
  zs::SimdPath path;
  bool adamw;
  double weight_decay;
};

std::string case_name(const testing::TestParamInfo<PathCase>& info) {
  std::string wd = info.param.weight_decay == 0 ? "NoWd" : "Wd";
  return std::string(zs::to_string(info.param.path)) + (info.param.adamw ? "_AdamW_" : "_Adam_") + wd;
}

class CpuAdamVsTorch : public testing::TestWithParam<PathCase> {};

TEST_P(CpuAdamVsTorch, TwentyStepsMatchTorchOptim) {
  const PathCase c = GetParam();
  if (!zs::simd_supported(c.path)) {
    GTEST_SKIP() << "this CPU cannot run the " << zs::to_string(c.path)
                 << " path (CPU has: " << zs::cpu_simd_flags() << ")";
  }
  torch::manual_seed(42);
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  std::vector<torch::Tensor> ref;
  std::vector<zs::ParamShard> shards;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    torch::Tensor p = torch::randn({kSizes[i]});
    ref.push_back(p.clone().requires_grad_(true));
    shards.push_back({p.clone(), {}, "shard" + std::to_string(i)});
  }
  std::unique_ptr<torch::optim::Optimizer> torch_opt;
  if (c.adamw) {
    torch_opt = std::make_unique<torch::optim::AdamW>(
        ref, torch::optim::AdamWOptions(lr).betas({beta1, beta2}).eps(eps).weight_decay(c.weight_decay));
  } else {
    torch_opt = std::make_unique<torch::optim::Adam>(
        ref, torch::optim::AdamOptions(lr).betas({beta1, beta2}).eps(eps).weight_decay(c.weight_decay));
  }
  zs::CpuAdamOptions o;
  o.lr = lr;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  o.weight_decay = c.weight_decay;
  o.adamw = c.adamw;
  zs::FusedCpuAdam ours(o);
  ours.set_path(c.path);
  ASSERT_EQ(ours.path(), c.path == zs::SimdPath::kAuto ? zs::detect_simd() : c.path);

  double worst_p = 0;
  int64_t differing = 0;  // element-steps not bitwise equal to torch
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSizes.size(); ++i) {
      torch::Tensor g = torch::randn({kSizes[i]}) * (step % 3 == 0 ? 1e-3 : 1.0);
      ref[i].mutable_grad() = g.clone();
      shards[i].grad = g.clone();
    }
    torch_opt->step();
    ours.step(shards);
    for (size_t i = 0; i < kSizes.size(); ++i) {
      const torch::Tensor expect = ref[i].detach();
      worst_p = std::max(worst_p, max_rel_diff(shards[i].param, expect));
      differing += (shards[i].param != expect).sum().item<int64_t>();
    }
  }
  std::printf("[ %s ] path=%s, %d steps: max rel diff %.3g, element-steps not bitwise equal: %lld of %lld\n",
              case_name({c, 0}).c_str(), zs::to_string(ours.path()), kSteps, worst_p,
              static_cast<long long>(differing), static_cast<long long>(kSteps * (1 + 7 + 1000003)));
  EXPECT_LE(worst_p, 1e-6);
  EXPECT_EQ(ours.steps(), kSteps);
  EXPECT_EQ(ours.state_bytes(), 2 * 4 * (1 + 7 + 1000003));
}

// One shard of 100003 elements in three parameter groups (the middle one with its own decay and
// twice the lr, the last with no decay and a tenth of it) against torch::optim over the three
// slices as three param groups with those options.
TEST_P(CpuAdamVsTorch, GroupsInsideAShardMatchTorchParamGroups) {
  const PathCase c = GetParam();
  if (!zs::simd_supported(c.path)) GTEST_SKIP() << "this CPU cannot run the " << zs::to_string(c.path) << " path";
  torch::manual_seed(43);
  const double lr = 1e-2, wd_mid = 0.2;
  const std::vector<int64_t> cut = {0, 30001, 70003, 100003};
  const std::vector<double> wd = {c.weight_decay, wd_mid, 0.0}, scale = {1.0, 2.0, 0.1};
  zs::ParamShard shard{torch::randn({cut.back()}), {}, "unit",
                       {{cut[1], cut[2], wd[1], scale[1]}, {cut[2], cut[3], wd[2], scale[2]}}};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<torch::Tensor> ref;
  for (size_t k = 0; k < 3; ++k) {
    ref.push_back(shard.param.narrow(0, cut[k], cut[k + 1] - cut[k]).clone().requires_grad_(true));
    std::unique_ptr<torch::optim::OptimizerOptions> o;
    if (c.adamw) {
      o = std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr * scale[k]).weight_decay(wd[k]));
    } else {
      o = std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(lr * scale[k]).weight_decay(wd[k]));
    }
    groups.emplace_back(std::vector<torch::Tensor>{ref.back()}, std::move(o));
  }
  std::unique_ptr<torch::optim::Optimizer> torch_opt;
  if (c.adamw) {
    torch_opt = std::make_unique<torch::optim::AdamW>(std::move(groups));
  } else {
    torch_opt = std::make_unique<torch::optim::Adam>(std::move(groups));
  }
  zs::CpuAdamOptions o;
  o.lr = lr;
  o.weight_decay = c.weight_decay;
  o.adamw = c.adamw;
  zs::FusedCpuAdam ours(o);
  ours.set_path(c.path);
  double worst = 0;
  for (int step = 0; step < 10; ++step) {
    shard.grad = torch::randn({cut.back()});
    for (size_t k = 0; k < 3; ++k) ref[k].mutable_grad() = shard.grad.narrow(0, cut[k], cut[k + 1] - cut[k]).clone();
    torch_opt->step();
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
    for (bool adamw : {false, true}) {
      for (double wd : {0.0, 0.01}) cases.push_back({p, adamw, wd});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuAdamVsTorch, testing::ValuesIn(all_cases()), case_name);

// ---- the fused low-precision copy ----

torch::Tensor from_bits(const std::vector<uint32_t>& bits) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(bits.size())});
  std::memcpy(t.data_ptr<float>(), bits.data(), bits.size() * 4);
  return t;
}

class CpuAdamCopy : public testing::TestWithParam<zs::SimdPath> {};

// With lr = 0 the params keep crafted values (ties, overflow, subnormals, inf) that exercise every
// rounding case of the conversion; then ordinary updated values over several steps.
TEST_P(CpuAdamCopy, FusedCopyEqualsTensorTo) {
  const zs::SimdPath path = GetParam();
  if (!zs::simd_supported(path)) {
    GTEST_SKIP() << "this CPU cannot run the " << zs::to_string(path)
                 << " path (CPU has: " << zs::cpu_simd_flags() << ")";
  }
  std::vector<uint32_t> bits = {
      0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  // bf16 ties to even (down, up), near ties
      0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,  // max finite (rounds to inf), infinities
      0x00000001, 0x80400000, 0x38800000, 0x33800000,  // subnormals; fp16 min normal; fp16 tie to 0
      0x477FF000, 0x47800000, 0x3F801000, 0x3F803000,  // 65520 (fp16 -> inf), 65536, fp16 ties
      0x3F800000, 0xBF800000, 0x40490FDB, 0x3DCCCCCD}; // 1, -1, pi, 0.1
  torch::Tensor crafted = from_bits(bits);
  torch::Tensor random = torch::randn({1000003}) * 100;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    for (double lr : {0.0, 1e-2}) {
      zs::CpuAdamOptions o;
      o.lr = lr;
      zs::FusedCpuAdam opt(o);
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
          const int64_t mismatches = (lp[i].view(torch::kShort) != expect.view(torch::kShort)).sum().item<int64_t>();
          EXPECT_EQ(mismatches, 0) << zs::to_string(path) << " " << dtype << " lr=" << lr
                                   << " shard " << shards[i].name << " step " << step;
        }
      }
      if (lr == 0) EXPECT_TRUE(torch::equal(shards[0].param, crafted)) << "lr = 0 must keep params";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuAdamCopy,
                         testing::Values(zs::SimdPath::kScalar, zs::SimdPath::kAvx2, zs::SimdPath::kAvx512),
                         [](const testing::TestParamInfo<zs::SimdPath>& i) { return zs::to_string(i.param); });

// ---- paths and errors ----

TEST(CpuAdam, DetectAndCap) {
  std::printf("[ detect ] best path: %s; CPU has: %s; threads: %d\n", zs::to_string(zs::detect_simd()),
              zs::cpu_simd_flags().c_str(), zs::cpu_adam_threads());
  zs::FusedCpuAdam opt(zs::CpuAdamOptions{});
  EXPECT_EQ(opt.path(), zs::detect_simd());
  opt.set_path(zs::SimdPath::kAuto);
  EXPECT_EQ(opt.path(), zs::detect_simd());
  {
    ScopedSimdCap cap("scalar");
    EXPECT_EQ(zs::detect_simd(), zs::SimdPath::kScalar);
    EXPECT_EQ(zs::FusedCpuAdam(zs::CpuAdamOptions{}).path(), zs::SimdPath::kScalar);
  }
  {
    ScopedSimdCap cap("sse");
    expect_usage_error([] { zs::detect_simd(); }, {"ZS_CPU_SIMD_MAX", "sse", "scalar, avx2, avx512"});
  }
}

TEST(CpuAdam, ForcingAnUnsupportedPathIsAnError) {
  zs::FusedCpuAdam opt(zs::CpuAdamOptions{});
  {
    // Make this CPU look like one without AVX2/AVX-512, whatever it really has.
    ScopedSimdCap cap("scalar");
    expect_usage_error([&] { opt.set_path(zs::SimdPath::kAvx2); },
                       {"set_path(avx2)", "cannot run", "avx2, fma, f16c", "CPU has:", "ZS_CPU_SIMD_MAX = scalar"});
    expect_usage_error([&] { opt.set_path(zs::SimdPath::kAvx512); }, {"set_path(avx512)", "avx512f"});
  }
  if (!zs::simd_supported(zs::SimdPath::kAvx512)) {
    expect_usage_error([&] { opt.set_path(zs::SimdPath::kAvx512); }, {"set_path(avx512)", "CPU has:"});
  }
}

TEST(CpuAdam, BadOptionsAreErrors) {
  auto with = [](const std::function<void(zs::CpuAdamOptions&)>& edit) {
    zs::CpuAdamOptions o;
    edit(o);
    return [o] { zs::FusedCpuAdam opt(o); };
  };
  expect_usage_error(with([](auto& o) { o.lr = -1; }), {"CpuAdamOptions.lr = -1", "allowed: [0, inf)"});
  expect_usage_error(with([](auto& o) { o.beta1 = 1; }), {"CpuAdamOptions.beta1 = 1", "[0, 1)"});
  expect_usage_error(with([](auto& o) { o.beta2 = -0.5; }), {"CpuAdamOptions.beta2 = -0.5"});
  expect_usage_error(with([](auto& o) { o.eps = 0; }), {"CpuAdamOptions.eps = 0", "(0, inf)"});
  expect_usage_error(with([](auto& o) { o.weight_decay = NAN; }), {"CpuAdamOptions.weight_decay = nan"});
  expect_usage_error(with([](auto& o) { o.amsgrad = true; }), {"amsgrad", "not supported"});
}

TEST(CpuAdam, BadShardsAreErrorsAndChangeNothing) {
  zs::FusedCpuAdam opt(zs::CpuAdamOptions{});
  std::vector<zs::ParamShard> shards = {{torch::ones({5}), torch::ones({5}), "a"},
                                        {torch::ones({3}), torch::ones({3}), "b"}};
  expect_usage_error([&] { opt.step({{torch::ones({5}, torch::kDouble), {}, "d"}}); },
                     {"shard 0 ('d')", "fp32 CPU", "Double"});
  expect_usage_error([&] { opt.step({{torch::ones({4}), torch::ones({5}), "g"}}); },
                     {"grad of shard 0 ('g')", "must match"});
  expect_usage_error([&] { opt.step({{torch::ones({4, 2}).t(), {}, "nc"}}); }, {"non-contiguous"});
  expect_usage_error([&] { opt.step_with_copy(shards, {torch::empty({5}, torch::kBFloat16)}); },
                     {"1 low-precision outputs for 2 shards"});
  expect_usage_error(
      [&] { opt.step_with_copy(shards, {torch::empty({5}, torch::kFloat), torch::Tensor()}); },
      {"output 0 (shard 'a')", "BFloat16 or Half"});
  expect_usage_error(
      [&] { opt.step_with_copy(shards, {torch::Tensor(), torch::empty({4}, torch::kHalf)}); },
      {"output 1 (shard 'b')", "of 3 elements"});
  EXPECT_TRUE(torch::equal(shards[0].param, torch::ones({5})));
  EXPECT_EQ(opt.steps(), 0);

  opt.step(shards);
  expect_usage_error([&] { opt.step({shards[0]}); }, {"got 1 shards, the first step had 2"});
  expect_usage_error([&] { opt.step({shards[0], {torch::ones({4}), {}, "b"}}); },
                     {"shard 1 ('b') changed", "expected 3 elements", "got 4"});
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_NE(opt.describe().find("FusedCpuAdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0"),
            std::string::npos) << opt.describe();
}

}  // namespace
