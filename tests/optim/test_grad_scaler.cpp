// SPDX-License-Identifier: Apache-2.0
// GradScaler: exact scaling and unscaling, the all-reduced overflow decision (an inf on one rank
// skips the step on every rank), hysteresis, growth, the min_scale error, state round trips, the
// modes, and an end-to-end run through the ShardingEngine whose result must equal, element by
// element, a run that simply leaves the overflowing step out. Run at 1, 2 and 4 ranks.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/optim/grad_scaler.h"
#include "zeroshard/optim/optimizer.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
using LossScale = zs::LossScaleOptions;
using Mode = zs::LossScaleMode;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

LossScale make_cfg(Mode mode, double initial = 1024, int growth_interval = 3, int hysteresis = 1,
                   double min_scale = 1) {
  LossScale c;
  c.mode = mode;
  c.initial_scale = initial;
  c.growth_interval = growth_interval;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  return c;
}

zs::GradScaler make_scaler(const LossScale& c, bool fp16 = true) { return zs::GradScaler(c, fp16, zs::test::world()); }

// Two shards and one without a gradient, as a rank's param_shards() would be; different values
// on every rank. Gradients are already multiplied by `scale` (exact for powers of two).
struct Shards {
  std::vector<zs::ParamShard> list;
  std::vector<at::Tensor> unscaled;  // the gradients before scaling
};

Shards make_shards(double scale, int64_t seed = 0) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(100 + 31 * seed + zs::test::rank());
  Shards s;
  for (int64_t n : {37, 0, 11}) {
    zs::ParamShard p{torch::randn({n == 0 ? 5 : n}, g), {}, "unit" + std::to_string(s.list.size())};
    if (n > 0) {
      s.unscaled.push_back(torch::randn({n}, g));
      p.grad = s.unscaled.back() * scale;
    } else {
      s.unscaled.push_back({});
    }
    s.list.push_back(p);
  }
  return s;
}

// One step of a scaler on fresh shards; `overflow` puts an inf into the last rank's first gradient
// (or NaN when `nan`). Returns unscale_and_check's decision; runs update().
bool run_step(zs::GradScaler& scaler, bool overflow, bool nan = false) {
  Shards s = make_shards(scaler.scale(), scaler.steps());
  if (overflow && zs::test::rank() == zs::test::world_size() - 1) {
    s.list[0].grad[3] = nan ? std::nanf("") : kInf;
  }
  const bool ok = scaler.unscale_and_check(s.list);
  scaler.update();
  return ok;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Message of the `Err` that fn throws, or a description of what happened instead. Never throws,
// so every rank reaches the next collective.
// Engine registry of declared units is keyed by module address (see engine_test_util.h's
// keep_alive): keep every model alive until the process ends.
template <typename Holder>
Holder keep_alive(Holder h) {
  static std::vector<std::shared_ptr<torch::nn::Module>> graveyard;
  graveyard.push_back(h.ptr());
  return h;
}

}  // namespace

TEST(GradScaler, ScaleMultipliesTheLoss) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024));
  torch::Tensor loss = torch::tensor(0.3712f);
  EXPECT_TRUE(torch::equal(scaler.scale(loss), loss * 1024.0f));
  EXPECT_EQ(scaler.scale(loss).scalar_type(), at::kFloat);
  // Differentiable: the gradient of the scaled loss is scale times the plain one.
  torch::Tensor w = torch::tensor(2.5f).requires_grad_(true);
  scaler.scale(w * w).backward();
  EXPECT_FLOAT_EQ(w.grad().item<float>(), 1024.0f * 5.0f);
}

TEST(GradScaler, UnscaleIsBitwiseExactForPowerOfTwoScales) {
  for (double scale : {65536.0, 1024.0, 0.5}) {
    auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 3, 1, 0.25));
    zs::GradScalerState st = scaler.state();
    st.scale = scale;  // below 1 only by backing off (initial_scale >= 1): set it directly
    scaler.load_state(st);
    Shards s = make_shards(scaler.scale());
    EXPECT_TRUE(scaler.unscale_and_check(s.list));
    for (size_t i = 0; i < s.list.size(); ++i) {
      if (!s.unscaled[i].defined()) {
        EXPECT_FALSE(s.list[i].grad.defined()) << "a shard without a gradient stays without one";
        continue;
      }
      EXPECT_TRUE(torch::equal(s.list[i].grad, s.unscaled[i])) << "scale " << scale << ", shard " << i;
    }
    scaler.update();
    EXPECT_FALSE(scaler.last_step_skipped());
  }
}

TEST(GradScaler, ChecksTheUnscaledGradients) {
  // Below scale 1, unscaling multiplies: a finite gradient that becomes inf must skip the step.
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 3, 1, 0.25));
  zs::GradScalerState st = scaler.state();
  st.scale = 0.5;
  scaler.load_state(st);
  Shards s = make_shards(1.0);
  if (zs::test::rank() == 0) s.list[0].grad[1] = std::numeric_limits<float>::max();
  EXPECT_FALSE(scaler.unscale_and_check(s.list));
  scaler.update();
  EXPECT_EQ(scaler.scale(), 0.25);
}

TEST(GradScaler, OverflowOnLastRankSkipsTheStepOnEveryRank) {
  ZS_REQUIRE_RANKS(2);
  for (bool nan : {false, true}) {
    auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 3, /*hysteresis=*/1));
    auto opt = zs::make_sgd(zs::SgdOptions{});
    Shards s = make_shards(scaler.scale());
    if (zs::test::rank() == zs::test::world_size() - 1) s.list[2].grad[5] = nan ? std::nanf("") : -kInf;
    std::vector<at::Tensor> before;
    for (auto& p : s.list) before.push_back(p.param.clone());
    EXPECT_FALSE(scaler.step(*opt, s.list)) << "rank " << zs::test::rank() << " must skip with the others";
    for (size_t i = 0; i < s.list.size(); ++i) EXPECT_TRUE(torch::equal(s.list[i].param, before[i]));
    EXPECT_EQ(opt->steps(), 0);
    EXPECT_TRUE(scaler.last_step_skipped());
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.scale(), 512.0);
    // The next, finite step is applied everywhere.
    Shards t = make_shards(scaler.scale(), 1);
    EXPECT_TRUE(scaler.step(*opt, t.list));
    EXPECT_EQ(opt->steps(), 1);
    EXPECT_FALSE(scaler.last_step_skipped());
    EXPECT_EQ(scaler.scale(), 512.0);
  }
}

TEST(GradScaler, Hysteresis1BacksOffAtEveryOverflow) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 1000, 1));
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(run_step(scaler, false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_FALSE(run_step(scaler, true, /*nan=*/true));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.steps(), 3);
}

TEST(GradScaler, Hysteresis2BacksOffAtTheSecondConsecutiveOverflow) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 1000, 2));
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 1024.0) << "the first overflow is tolerated";
  EXPECT_EQ(scaler.state().hysteresis_left, 1);
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 512.0) << "the second consecutive overflow backs off";
  EXPECT_EQ(scaler.state().hysteresis_left, 2) << "the counter starts again after a back-off";
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 512.0);
  // A finite step in between refills the counter: the overflows must be consecutive.
  EXPECT_TRUE(run_step(scaler, false));
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_EQ(scaler.skipped_steps(), 5);
}

TEST(GradScaler, GrowsAfterGrowthIntervalFiniteSteps) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, /*growth_interval=*/3, 1));
  EXPECT_TRUE(run_step(scaler, false));
  EXPECT_TRUE(run_step(scaler, false));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.state().growth_tracker, 2);
  EXPECT_TRUE(run_step(scaler, false));
  EXPECT_EQ(scaler.scale(), 2048.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  // An overflow resets the count: two finite steps, an overflow, then three more to grow.
  run_step(scaler, false);
  run_step(scaler, false);
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  run_step(scaler, false);
  run_step(scaler, false);
  EXPECT_EQ(scaler.scale(), 1024.0);
  run_step(scaler, false);
  EXPECT_EQ(scaler.scale(), 2048.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.steps(), 9);
}

TEST(GradScaler, OverflowAtMinScaleIsAClearErrorNamingTheStep) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 4, 1000, 1, /*min_scale=*/1));
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 2.0);
  EXPECT_FALSE(run_step(scaler, true));
  EXPECT_EQ(scaler.scale(), 1.0);
  std::string msg = error_text_of<zs::LossScaleError>([&] { run_step(scaler, true); });
  EXPECT_TRUE(contains(msg, "loss scale error")) << msg;
  EXPECT_TRUE(contains(msg, "fp16 gradients keep overflowing at the minimum loss scale 1 at step 3")) << msg;
  EXPECT_TRUE(contains(msg, "lower the learning rate, use bf16, or check the model for infinities")) << msg;
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  // A finite step after the error works; another overflow at the minimum is the same error.
  EXPECT_TRUE(run_step(scaler, false));
  msg = error_text_of<zs::LossScaleError>([&] { run_step(scaler, true); });
  EXPECT_TRUE(contains(msg, "at step 5")) << msg;

  // With hysteresis 2 the minimum tolerates one more overflow before the error; a min_scale that
  // is not a power of the backoff is reached exactly (clamped).
  auto h2 = make_scaler(make_cfg(Mode::kDynamic, 4, 1000, 2, /*min_scale=*/3));
  run_step(h2, true);
  run_step(h2, true);
  EXPECT_EQ(h2.scale(), 3.0);
  EXPECT_FALSE(run_step(h2, true));
  msg = error_text_of<zs::LossScaleError>([&] { run_step(h2, true); });
  EXPECT_TRUE(contains(msg, "minimum loss scale 3 at step 4")) << msg;
}

TEST(GradScaler, RestoredStateBehavesIdentically) {
  const LossScale cfg = make_cfg(Mode::kDynamic, 1024, 3, 2);
  // Overflow pattern: history for the first scaler, then 10 steps for both.
  const std::vector<bool> history = {false, true, false, false, false, true, true, false};
  const std::vector<bool> next = {true, false, false, false, true, true, false, false, false, true};
  auto a = make_scaler(cfg);
  for (bool o : history) run_step(a, o);
  auto b = make_scaler(cfg);
  b.load_state(a.state());
  EXPECT_EQ(b.to_string(), a.to_string());
  for (size_t i = 0; i < next.size(); ++i) {
    const bool da = run_step(a, next[i]), db = run_step(b, next[i]);
    EXPECT_EQ(da, db) << "step " << i;
    EXPECT_EQ(a.scale(), b.scale()) << "step " << i;
    EXPECT_EQ(a.to_string(), b.to_string()) << "step " << i;
  }
  const zs::GradScalerState sa = a.state(), sb = b.state();
  EXPECT_EQ(sa.scale, sb.scale);
  EXPECT_EQ(sa.growth_tracker, sb.growth_tracker);
  EXPECT_EQ(sa.hysteresis_left, sb.hysteresis_left);
  EXPECT_EQ(sa.steps, sb.steps);
  EXPECT_EQ(sa.skipped, sb.skipped);
  EXPECT_EQ(sa.steps, 18);
  EXPECT_EQ(sa.skipped, 7);
}

TEST(GradScaler, BadStateIsRejectedNamingTheField) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic));
  const zs::GradScalerState good = scaler.state();
  auto with = [&](const std::function<void(zs::GradScalerState&)>& change) {
    zs::GradScalerState s = good;
    change(s);
    return error_text_of<zs::UsageError>([&] { scaler.load_state(s); });
  };
  EXPECT_TRUE(contains(with([](auto& s) { s.scale = 0; }), "scale = 0 must be finite and > 0"));
  EXPECT_TRUE(contains(with([](auto& s) { s.scale = -2; }), "scale = -2"));
  EXPECT_TRUE(contains(with([](auto& s) { s.scale = INFINITY; }), "scale = inf"));
  EXPECT_TRUE(contains(with([](auto& s) { s.scale = NAN; }), "must be finite"));
  EXPECT_TRUE(contains(with([](auto& s) { s.growth_tracker = -1; }), "growth_tracker = -1 must be >= 0"));
  EXPECT_TRUE(contains(with([](auto& s) { s.hysteresis_left = 0; }), "hysteresis_left = 0 must be >= 1"));
  EXPECT_TRUE(contains(with([](auto& s) { s.steps = -1; }), "steps = -1 must be >= 0"));
  EXPECT_TRUE(contains(with([](auto& s) { s.skipped = -1; }), "skipped = -1"));
  EXPECT_TRUE(contains(with([](auto& s) { s.steps = 2, s.skipped = 3; }), "skipped = 3 must be in [0, steps = 2]"));
  EXPECT_EQ(scaler.state().scale, good.scale) << "a rejected state changes nothing";
  // A fixed-scale mode refuses another scale.
  auto fixed = make_scaler(make_cfg(Mode::kStatic, 128));
  zs::GradScalerState s = fixed.state();
  s.scale = 64;
  std::string msg = error_text_of<zs::UsageError>([&] { fixed.load_state(s); });
  EXPECT_TRUE(contains(msg, "scale = 64 differs from the STATIC scale 128")) << msg;
}

TEST(GradScaler, AutoResolvesFromFp16) {
  auto on = make_scaler(make_cfg(Mode::kAuto, 1024), /*fp16=*/true);
  EXPECT_EQ(on.mode(), zs::LossScaleMode::kDynamic);
  EXPECT_EQ(on.scale(), 1024.0);
  auto off = make_scaler(make_cfg(Mode::kAuto, 1024), /*fp16=*/false);
  EXPECT_EQ(off.mode(), zs::LossScaleMode::kDisabled);
  EXPECT_EQ(off.scale(), 1.0);
  // Explicit modes ignore the flag.
  EXPECT_EQ(make_scaler(make_cfg(Mode::kDynamic), false).mode(), zs::LossScaleMode::kDynamic);
  EXPECT_EQ(make_scaler(make_cfg(Mode::kDisabled), true).mode(), zs::LossScaleMode::kDisabled);
  // (Which precision settings count as fp16: RunOptions::fp16, tests/config/test_resolve.cpp.)
  // Schema defaults: AUTO, 65536.
  EXPECT_EQ(zs::GradScaler(LossScale(), true, zs::test::world()).scale(), 65536.0);
}

TEST(GradScaler, StaticNeverChangesTheScale) {
  auto scaler = make_scaler(make_cfg(Mode::kStatic, 256, 1, 1, 256));
  const std::vector<bool> pattern = {false, false, true, true, true, true, false, false, false, true};
  int64_t skipped = 0;
  for (bool o : pattern) {
    EXPECT_EQ(run_step(scaler, o), !o);
    skipped += o;
    EXPECT_EQ(scaler.scale(), 256.0);
    EXPECT_EQ(scaler.last_step_skipped(), o);
  }
  EXPECT_EQ(scaler.skipped_steps(), skipped);
  // STATIC still unscales.
  Shards s = make_shards(256);
  EXPECT_TRUE(scaler.unscale_and_check(s.list));
  EXPECT_TRUE(torch::equal(s.list[0].grad, s.unscaled[0]));
  scaler.update();
}

TEST(GradScaler, DisabledHasScaleOneAndStillSkipsNonFiniteSteps) {
  auto scaler = make_scaler(make_cfg(Mode::kDisabled, 1024));
  EXPECT_EQ(scaler.scale(), 1.0);
  torch::Tensor loss = torch::tensor(1.5f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss)) << "DISABLED returns the loss itself";
  Shards s = make_shards(1.0);
  EXPECT_TRUE(scaler.unscale_and_check(s.list));
  EXPECT_TRUE(torch::equal(s.list[0].grad, s.unscaled[0]));
  scaler.update();
  EXPECT_FALSE(run_step(scaler, true)) << "non-finite gradients are not applied, even unscaled";
  EXPECT_FALSE(run_step(scaler, true, /*nan=*/true));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_TRUE(run_step(scaler, false));
}

TEST(GradScaler, MisuseAndBadOptionsAreClearErrors) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic));
  std::string msg = error_text_of<zs::UsageError>([&] { scaler.update(); });
  EXPECT_TRUE(contains(msg, "update without unscale_and_check")) << msg;
  Shards s = make_shards(scaler.scale());
  EXPECT_TRUE(scaler.unscale_and_check(s.list));
  msg = error_text_of<zs::UsageError>([&] { scaler.unscale_and_check(s.list); });
  EXPECT_TRUE(contains(msg, "called twice for one step")) << msg;
  msg = error_text_of<zs::UsageError>([&] { scaler.load_state(scaler.state()); });
  EXPECT_TRUE(contains(msg, "between unscale_and_check and update")) << msg;
  scaler.update();
  Shards half = make_shards(1.0);
  half.list[0].grad = half.list[0].grad.to(at::kHalf);
  msg = error_text_of<zs::UsageError>([&] { scaler.unscale_and_check(half.list); });
  EXPECT_TRUE(contains(msg, "gradient of shard 0 ('unit0') must be fp32, got Half")) << msg;

  LossScale c = make_cfg(Mode::kDynamic);
  c.backoff_factor = 1;
  msg = error_text_of<zs::UsageError>([&] { make_scaler(c); });
  EXPECT_TRUE(contains(msg, "LossScaleOptions.backoff_factor = 1 is out of range; allowed: (0, 1)")) << msg;
  c = make_cfg(Mode::kDynamic, 8, 3, 1, /*min_scale=*/16);
  msg = error_text_of<zs::UsageError>([&] { make_scaler(c); });
  EXPECT_TRUE(contains(msg, "LossScaleOptions.min_scale = 16 exceeds initial_scale = 8")) << msg;
  msg = error_text_of<zs::UsageError>([&] { zs::GradScaler(make_cfg(Mode::kDynamic), true, nullptr); });
  EXPECT_TRUE(contains(msg, "got null")) << msg;
}

TEST(GradScaler, ToStringShowsTheState) {
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 3, 2));
  run_step(scaler, false);
  run_step(scaler, true);
  EXPECT_EQ(scaler.to_string(),
            "GradScaler(mode=DYNAMIC, scale=1024, growth_tracker=0/3, hysteresis_left=1/2, steps=2, skipped=1, "
            "min_scale=1)");
  EXPECT_EQ(make_scaler(make_cfg(Mode::kDisabled)).to_string(), "GradScaler(mode=DISABLED, scale=1, steps=0, skipped=0)");
}

// ---- end to end through the engine ----

namespace {

constexpr int kSteps = 5;
constexpr int kOverflowStep = 2;

// Trains the Mlp for the steps in `steps` (each step's data depends on its number and the rank).
// With `scaler`, the loss is scaled and the step goes through unscale_and_check/update; at
// `overflow_step` rank 0 writes an inf into its first gradient shard after backward. Returns the
// full state after every step (collective).
std::vector<std::map<std::string, at::Tensor>> train(const std::vector<int>& steps, zs::GradScaler* scaler,
                                                     int overflow_step, std::vector<bool>* decisions) {
  torch::manual_seed(11);
  auto model = keep_alive(zs_test::Mlp());
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), zs::ShardingOptions{});
  zs::AdamOptions ao;
  ao.lr = 1e-2;
  auto opt = zs::make_adamw(ao);
  std::vector<std::map<std::string, at::Tensor>> states;
  states.push_back(engine.full_state_dict());
  for (int step : steps) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(900 + 13 * step + zs::test::rank());
    torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
    torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
    if (scaler == nullptr) {
      loss.backward();
      engine.step(*opt);
    } else {
      scaler->scale(loss).backward();
      if (step == overflow_step && zs::test::rank() == 0) {
        auto shards = engine.param_shards();
        at::NoGradGuard no_grad;
        shards.at(0).grad[0] = kInf;
      }
      const bool ok = scaler->unscale_and_check(engine.param_shards());
      decisions->push_back(ok);
      if (ok) engine.step(*opt);
      scaler->update();
    }
    engine.zero_grad();
    states.push_back(engine.full_state_dict());
  }
  return states;
}

double max_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return INFINITY;
    worst = std::max(worst, zs::test::max_abs_diff(t, it->second));
  }
  return worst;
}

}  // namespace

TEST(GradScalerEngine, OverflowStepIsSkippedOnEveryRankAndNothingElseChanges) {
  // Power-of-two scale: scaling the loss and unscaling the gradients is exact, so the scaled run
  // must equal the plain run that leaves the overflowing step out, bit for bit.
  auto scaler = make_scaler(make_cfg(Mode::kDynamic, 1024, 1000, /*hysteresis=*/1));
  std::vector<bool> decisions;
  std::vector<int> all_steps;
  for (int s = 0; s < kSteps; ++s) all_steps.push_back(s);
  auto scaled = train(all_steps, &scaler, kOverflowStep, &decisions);
  std::vector<int> without_overflow;
  for (int s = 0; s < kSteps; ++s) {
    if (s != kOverflowStep) without_overflow.push_back(s);
  }
  auto plain = train(without_overflow, nullptr, -1, nullptr);

  ASSERT_EQ(decisions.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(decisions[s], s != kOverflowStep) << "step " << s << " on rank " << zs::test::rank();
    const double changed = max_diff(scaled[s], scaled[s + 1]);
    if (s == kOverflowStep) {
      EXPECT_EQ(changed, 0.0) << "the overflowing step changed the parameters on rank " << zs::test::rank();
    } else {
      EXPECT_GT(changed, 0.0) << "step " << s << " did not train";
    }
  }
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // After step s the scaled run equals the plain run after its steps up to s (one fewer past the
  // overflow).
  for (int s = 0; s < kSteps; ++s) {
    const int plain_index = s < kOverflowStep ? s + 1 : s;
    EXPECT_EQ(max_diff(scaled[s + 1], plain[plain_index]), 0.0) << "after step " << s;
  }
}

// Without loss scaling the step's inf/nan decision comes from the global gradient norm
// (check_norm): the same skip, without unscale_and_check's pass and all-reduce.
TEST(GradScaler, DisabledDecidesFromTheGlobalNorm) {
  auto scaler = make_scaler(make_cfg(Mode::kDisabled, 1024));
  EXPECT_TRUE(scaler.check_norm(3.5));
  scaler.update();
  EXPECT_FALSE(scaler.check_norm(std::numeric_limits<double>::infinity()));
  scaler.update();
  EXPECT_TRUE(scaler.last_step_skipped());
  EXPECT_FALSE(scaler.check_norm(std::nan("")));
  const std::string twice = error_text_of<zs::UsageError>([&] { scaler.check_norm(1.0); });
  EXPECT_TRUE(contains(twice, "check_norm called twice")) << twice;
  scaler.update();
  EXPECT_EQ(scaler.steps(), 3);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.scale(), 1.0);
  for (auto mode : {Mode::kDynamic, Mode::kStatic}) {
    auto scaling = make_scaler(make_cfg(mode, 1024));
    const std::string e = error_text_of<zs::UsageError>([&] { scaling.check_norm(1.0); });
    EXPECT_TRUE(contains(e, "call unscale_and_check")) << e;
  }
}

namespace {
// The world communicator's collectives between two barriers (each barrier has a sequence number).
uint64_t world_seq() {
  auto w = zs::test::world()->barrier("test.seq");
  w->wait();
  return w->signature().seq;
}
}  // namespace

TEST(GradScalerEngine, DisabledSkipsFromTheClipNormWithoutACollectiveOfItsOwn) {
  torch::manual_seed(11);
  auto model = keep_alive(zs_test::Mlp());
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), zs::ShardingOptions{});
  auto scaler = make_scaler(make_cfg(Mode::kDisabled), /*fp16=*/false);
  for (int step = 0; step < 2; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(700 + step + zs::test::rank());
    torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
    torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
    scaler.scale(loss).backward();
    if (step == 1 && zs::test::rank() == zs::test::world_size() - 1) {
      at::NoGradGuard no_grad;
      engine.param_shards().at(0).grad[0] = kInf;  // on one rank only: every rank must skip
    }
    const at::Tensor norm = engine.clip_grad_norm_tensor(std::numeric_limits<double>::infinity());
    EXPECT_EQ(norm.numel(), 1);
    EXPECT_EQ(norm.scalar_type(), at::kDouble);
    EXPECT_TRUE(norm.device().is_cpu()) << "where the shard group's collectives run (MPI here)";
    const uint64_t before = world_seq();
    const bool finite = scaler.check_norm(norm.item<double>());
    const uint64_t after = world_seq();
    EXPECT_EQ(after - before, 1u) << "check_norm ran a collective";
    EXPECT_EQ(finite, step == 0) << "step " << step << " on rank " << zs::test::rank();
    scaler.update();
    engine.zero_grad();
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

// clip_grad_norm_tensor clips on the device exactly as the host formula does (coefficient
// max_norm / (norm + 1e-6) in double, applied in float when below 1), and clip_grad_norm returns
// the same norm as a double.
TEST(GradScalerEngine, TensorClipEqualsTheHostFormulaBitForBit) {
  std::vector<std::vector<at::Tensor>> grads(2);
  std::vector<double> norms(2);
  for (int variant = 0; variant < 2; ++variant) {
    torch::manual_seed(11);
    auto model = keep_alive(zs_test::Mlp());
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), zs::ShardingOptions{});
    auto g = torch::make_generator<at::CPUGeneratorImpl>(500 + zs::test::rank());
    torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
    engine.forward([&] { return torch::mse_loss(model->forward(x), y); }).backward();
    const double unclipped = engine.clip_grad_norm_tensor(std::numeric_limits<double>::infinity()).item<double>();
    const double max_norm = unclipped / 4;  // clipping takes effect
    if (variant == 0) {
      norms[0] = engine.clip_grad_norm(std::numeric_limits<double>::infinity());
      const double coef = max_norm / (norms[0] + 1e-6);
      at::NoGradGuard no_grad;
      for (const zs::ParamShard& s : engine.param_shards()) {
        if (s.grad.defined()) s.grad.mul_(static_cast<float>(coef));
      }
    } else {
      norms[1] = engine.clip_grad_norm_tensor(max_norm).item<double>();
    }
    EXPECT_EQ(norms[variant], unclipped) << "measuring without clipping changed the gradients";
    for (const zs::ParamShard& s : engine.param_shards()) {
      if (s.grad.defined()) grads[variant].push_back(s.grad.clone());
    }
    const double after = engine.clip_grad_norm_tensor(std::numeric_limits<double>::infinity()).item<double>();
    EXPECT_NEAR(after, max_norm, max_norm * 1e-5);
    engine.zero_grad();
  }
  EXPECT_EQ(norms[0], norms[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "shard " << i;
}
