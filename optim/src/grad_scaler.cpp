// SPDX-License-Identifier: Apache-2.0
// Loss scaling (see grad_scaler.h). The inf/nan check reads each unscaled gradient shard once
// with aminmax (no temporary of the shard's size: min and max propagate NaN, and an inf is the
// min or the max), gathers the per-shard results into one small tensor, and makes one all-reduce.
// Checking after unscaling also catches a finite gradient that 1/scale pushes to inf (scale < 1).

#include "zeroshard/optim/grad_scaler.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/isfinite.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "zeroshard/base/format.h"

namespace zeroshard {
namespace {

using LossScale = LossScaleOptions;

// What the scaler needs to be defined (a valid config gives it: config/src/config_rules.cpp).
void check_options(const LossScale& c, LossScaleMode mode) {
  auto bad = [](const char* field, const std::string& value, const char* allowed) {
    ZS_THROW(UsageError, "LossScaleOptions.", field, " = ", value, " is out of range; allowed: ", allowed);
  };
  if (!(c.initial_scale >= 1 && c.initial_scale <= 1e30)) bad("initial_scale", format_double(c.initial_scale), "[1, 1e30]");
  if (!(c.growth_factor >= 1 && c.growth_factor <= 1000)) bad("growth_factor", format_double(c.growth_factor), "[1, 1000]");
  if (!(c.backoff_factor > 0 && c.backoff_factor < 1)) bad("backoff_factor", format_double(c.backoff_factor), "(0, 1)");
  if (c.growth_interval < 1) bad("growth_interval", std::to_string(c.growth_interval), ">= 1");
  if (c.hysteresis < 1 || c.hysteresis > 1000) bad("hysteresis", std::to_string(c.hysteresis), "[1, 1000]");
  if (!(c.min_scale >= 0 && c.min_scale <= 1e30)) bad("min_scale", format_double(c.min_scale), "[0, 1e30]");
  ZS_REQUIRE(mode != LossScaleMode::kDynamic || c.min_scale <= c.initial_scale, UsageError,
             "LossScaleOptions.min_scale = ", format_double(c.min_scale), " exceeds initial_scale = ",
             format_double(c.initial_scale), ": the dynamic scale starts at initial_scale and never backs off below "
             "min_scale");
}

LossScaleMode resolve(LossScaleMode mode, bool fp16_in_use) {
  if (mode != LossScaleMode::kAuto) return mode;
  return fp16_in_use ? LossScaleMode::kDynamic : LossScaleMode::kDisabled;
}

double fixed_scale(const LossScale& c, LossScaleMode mode) {
  return mode == LossScaleMode::kDisabled ? 1.0 : c.initial_scale;
}

// The lowest scale DYNAMIC backs off to: min_scale, but never below the smallest normal float
// (the loss is multiplied in float; a zero or subnormal scale would lose the gradients).
double scale_floor(const LossScale& c) {
  return std::max(c.min_scale, static_cast<double>(std::numeric_limits<float>::min()));
}

}  // namespace

const char* to_string(LossScaleMode m) {
  switch (m) {
    case LossScaleMode::kAuto: return "AUTO";
    case LossScaleMode::kDynamic: return "DYNAMIC";
    case LossScaleMode::kStatic: return "STATIC";
    case LossScaleMode::kDisabled: return "DISABLED";
  }
  return "unknown loss scale mode";
}

GradScaler::GradScaler(const LossScaleOptions& options, bool fp16_in_use, std::shared_ptr<Communicator> comm)
    : cfg_(options), mode_(resolve(options.mode, fp16_in_use)), comm_(std::move(comm)) {
  ZS_REQUIRE(comm_ != nullptr, UsageError,
             "GradScaler needs the communicator of all ranks holding the model's shards "
             "(session.world()), got null");
  check_options(cfg_, mode_);
  state_.scale = fixed_scale(cfg_, mode_);
  state_.hysteresis_left = cfg_.hysteresis;
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  ZS_REQUIRE(loss.defined(), UsageError, "GradScaler::scale: the loss is undefined");
  if (mode_ == LossScaleMode::kDisabled) return loss;
  return loss.mul(state_.scale);
}

bool GradScaler::unscale_and_check(const std::vector<ParamShard>& shards) {
  ZS_REQUIRE(!checked_, UsageError,
             "GradScaler::unscale_and_check called twice for one step (the gradients would be "
             "unscaled twice): call update() after every step");
  at::NoGradGuard no_grad;
  const double inv_scale = 1.0 / state_.scale;
  std::vector<at::Tensor> extremes;  // per shard: its min and max, after unscaling
  for (size_t i = 0; i < shards.size(); ++i) {
    const at::Tensor& g = shards[i].grad;
    if (!g.defined() || g.numel() == 0) continue;
    ZS_REQUIRE(!g.is_meta(), UsageError, "GradScaler::unscale_and_check: the gradient of shard ", i, " ('",
               shards[i].name, "') is offloaded (offload.grads): call unscale_and_check(engine.gradients())");
    ZS_REQUIRE(g.scalar_type() == at::kFloat, UsageError, "GradScaler::unscale_and_check: gradient of shard ", i,
               " ('", shards[i].name, "') must be fp32, got ", c10::toString(g.scalar_type()));
    if (inv_scale != 1.0) g.mul_(inv_scale);
    auto [lo, hi] = at::aminmax(g);
    extremes.push_back(lo.reshape({1}));
    extremes.push_back(hi.reshape({1}));
  }
  return decide(extremes);
}

bool GradScaler::unscale_and_check(GradientShards& grads) {
  ZS_REQUIRE(!checked_, UsageError,
             "GradScaler::unscale_and_check called twice for one step (the gradients would be "
             "unscaled twice): call update() after every step");
  at::NoGradGuard no_grad;
  const double inv_scale = 1.0 / state_.scale;
  std::vector<at::Tensor> extremes;
  for (size_t k = 0; k < grads.size(); ++k) {
    const at::Tensor& g = grads.read(k);
    if (k + 1 < grads.size()) grads.prefetch(k + 1);
    if (!g.defined() || g.numel() == 0) continue;
    const bool offloaded = grads.offloaded(k);
    at::Tensor unscaled = g;
    if (inv_scale != 1.0) {
      if (offloaded) {
        unscaled = g.mul(inv_scale);  // the values scale() gives it at its next load, bit for bit
      } else {
        grads.scale(k, inv_scale);  // in place
      }
    }
    auto [lo, hi] = at::aminmax(unscaled);
    extremes.push_back(lo.reshape({1}));
    extremes.push_back(hi.reshape({1}));
    if (offloaded) {
      grads.release(k);
      if (inv_scale != 1.0) grads.scale(k, inv_scale);  // recorded for its next load
    }
  }
  return decide(extremes);
}

bool GradScaler::decide(const std::vector<at::Tensor>& extremes) {
  // 1 where this rank holds a non-finite gradient, computed where the gradients are and moved to
  // the communicator's device (its own index: cuda:<local rank> for NCCL); read once, after the
  // all-reduce.
  const at::TensorOptions on_comm = at::TensorOptions().dtype(at::kFloat).device(comm_->device());
  at::Tensor flag = extremes.empty() ? at::zeros({1}, on_comm)
                                     : at::isfinite(at::cat(extremes)).logical_not().any().reshape({1}).to(on_comm);
  if (comm_->size() > 1) comm_->all_reduce(flag, ReduceOp::kMax, "zs.grad_scaler.found_inf")->wait();
  found_inf_ = flag.item<float>() != 0.0f;
  checked_ = true;
  return !found_inf_;
}

bool GradScaler::check_norm(double global_norm) {
  ZS_REQUIRE(mode_ == LossScaleMode::kDisabled, UsageError, "GradScaler::check_norm with loss scaling ",
             zeroshard::to_string(mode_), ": the gradients must be unscaled first; call unscale_and_check");
  ZS_REQUIRE(!checked_, UsageError,
             "GradScaler::check_norm called twice for one step: call update() after every step");
  found_inf_ = !std::isfinite(global_norm);
  checked_ = true;
  return !found_inf_;
}

bool GradScaler::step(ShardedOptimizer& opt, const std::vector<ParamShard>& shards) {
  const bool finite = unscale_and_check(shards);
  if (finite) opt.step(shards);
  update();
  return finite;
}

void GradScaler::update() {
  ZS_REQUIRE(checked_, UsageError,
             "GradScaler::update without unscale_and_check since the last update(): call "
             "unscale_and_check (or step) once per step, then update()");
  checked_ = false;
  ++state_.steps;
  last_step_skipped_ = found_inf_;
  if (found_inf_) ++state_.skipped;
  if (mode_ != LossScaleMode::kDynamic) return;
  if (found_inf_) {
    state_.growth_tracker = 0;
    if (--state_.hysteresis_left <= 0) back_off();
    return;
  }
  state_.hysteresis_left = cfg_.hysteresis;
  if (++state_.growth_tracker >= cfg_.growth_interval) {
    state_.growth_tracker = 0;
    const double grown = state_.scale * cfg_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) state_.scale = grown;
  }
}

void GradScaler::back_off() {
  const double floor = scale_floor(cfg_);
  if (state_.scale <= floor) {
    state_.hysteresis_left = 1;  // each further overflow step is the same error
    ZS_THROW(LossScaleError, "fp16 gradients keep overflowing at the minimum loss scale ", format_double(floor),
             " at step ", state_.steps, " (", state_.skipped, " of ", state_.steps,
             " steps skipped so far): lower the learning rate, use bf16, or check the model for "
             "infinities (precision.loss_scale.min_scale sets the minimum)");
  }
  state_.scale = std::max(state_.scale * cfg_.backoff_factor, floor);
  state_.hysteresis_left = cfg_.hysteresis;
}

void GradScaler::load_state(const GradScalerState& s) {
  ZS_REQUIRE(!checked_, UsageError,
             "GradScaler::load_state between unscale_and_check and update(): the gradients were "
             "unscaled with the old scale");
  ZS_REQUIRE(std::isfinite(s.scale) && s.scale > 0, UsageError, "GradScaler::load_state: scale = ",
             format_double(s.scale), " must be finite and > 0");
  ZS_REQUIRE(s.growth_tracker >= 0, UsageError, "GradScaler::load_state: growth_tracker = ", s.growth_tracker,
             " must be >= 0");
  ZS_REQUIRE(s.hysteresis_left >= 1, UsageError, "GradScaler::load_state: hysteresis_left = ", s.hysteresis_left,
             " must be >= 1");
  ZS_REQUIRE(s.steps >= 0, UsageError, "GradScaler::load_state: steps = ", s.steps, " must be >= 0");
  ZS_REQUIRE(s.skipped >= 0 && s.skipped <= s.steps, UsageError, "GradScaler::load_state: skipped = ", s.skipped,
             " must be in [0, steps = ", s.steps, "]");
  if (mode_ != LossScaleMode::kDynamic) {
    const double fixed = fixed_scale(cfg_, mode_);
    ZS_REQUIRE(s.scale == fixed, UsageError, "GradScaler::load_state: scale = ", format_double(s.scale),
               " differs from the ", zeroshard::to_string(mode_), " scale ", format_double(fixed),
               ": the state comes from a scaler with another mode or initial_scale; do not restore "
               "the scaler state when changing precision.loss_scale");
  }
  state_ = s;
  last_step_skipped_ = false;
}

std::string GradScaler::to_string() const {
  std::ostringstream os;
  os << "GradScaler(mode=" << zeroshard::to_string(mode_) << ", scale=" << format_double(state_.scale);
  if (mode_ == LossScaleMode::kDynamic) {
    os << ", growth_tracker=" << state_.growth_tracker << "/" << cfg_.growth_interval
       << ", hysteresis_left=" << state_.hysteresis_left << "/" << cfg_.hysteresis;
  }
  os << ", steps=" << state_.steps << ", skipped=" << state_.skipped;
  if (mode_ == LossScaleMode::kDynamic) os << ", min_scale=" << format_double(cfg_.min_scale);
  os << ")";
  return os.str();
}

}  // namespace zeroshard
