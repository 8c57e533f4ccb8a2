// Learning-rate schedules (see lr_scheduler.h and SchedulerConfig in core/proto/zeroshard.proto).
//
// Warmup (all types, warmup_steps = W > 0): lr_at(s) = lr * (s + 1) / W for s < W. The "+1"
// makes the first step use lr / W rather than 0 (a step at lr 0 would be wasted) and the last
// warmup step (s = W - 1) use the full lr. The schedule proper then starts at s = W with the full
// lr, so with warmup the peak lr is used by two consecutive steps (W - 1 and W).
//
// After warmup, with r = min_lr_ratio, T = total_steps, and progress
// p = clamp((s - W) / (T - W), 0, 1):
//   CONSTANT       lr
//   LINEAR_WARMUP  T set: lr * (1 - (1 - r) * p), exactly r * lr from s = T on; T unset: lr
//   COSINE         r * lr + (lr - r * lr) * 0.5 * (1 + cos(pi * p)), exactly r * lr from s = T on
//   STEP           lr * gamma ^ floor((s - W) / step_size)
// Fields a type does not use are ignored.

#include "zeroshard/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "zeroshard/base/format.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/config.h"

namespace zeroshard {
namespace {

using SchedType = LrScheduleOptions::Type;
constexpr double kPi = 3.14159265358979323846;


// The schema's ranges (config validation normally catches these first; a SchedulerConfig built in
// code is checked here too).
void check_ranges(const LrScheduleOptions& c, double base_lr) {
  ZS_REQUIRE(std::isfinite(base_lr) && base_lr >= 0, ConfigError, "optimizer.lr = ",
             format_double(base_lr), " is out of range for the scheduler; allowed: [0, inf)");
  ZS_REQUIRE(c.warmup_steps >= 0, ConfigError, "scheduler.warmup_steps = ", c.warmup_steps,
             " is out of range; allowed: >= 0");
  ZS_REQUIRE(c.total_steps >= 0, ConfigError, "scheduler.total_steps = ", c.total_steps,
             " is out of range; allowed: >= 0 (0 = unset)");
  ZS_REQUIRE(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, ConfigError,
             "scheduler.min_lr_ratio = ", format_double(c.min_lr_ratio),
             " is out of range; allowed: [0, 1]");
  ZS_REQUIRE(c.step_size >= 1, ConfigError, "scheduler.step_size = ", c.step_size,
             " is out of range; allowed: >= 1");
  ZS_REQUIRE(c.gamma > 0 && c.gamma <= 1, ConfigError, "scheduler.gamma = ",
             format_double(c.gamma), " is out of range; allowed: (0, 1]");
}

// Cross-field rules: the decay needs an end after the warmup; a minimum needs a decay to reach it.
void check_consistency(const LrScheduleOptions& c) {
  const std::string type = std::string(to_string(c.type));
  ZS_REQUIRE(c.type != SchedType::kCosine || c.total_steps > 0, ConfigError,
             "scheduler.total_steps must be set (> 0) for COSINE: it is the step where the decay "
             "ends");
  ZS_REQUIRE(c.total_steps == 0 || c.total_steps > c.warmup_steps, ConfigError,
             "scheduler.total_steps = ", c.total_steps, " must exceed scheduler.warmup_steps = ",
             c.warmup_steps, " for ", type);
  ZS_REQUIRE(c.type != SchedType::kLinearWarmup || c.total_steps > 0 || c.min_lr_ratio == 0,
             ConfigError, "scheduler.min_lr_ratio = ", format_double(c.min_lr_ratio),
             " needs scheduler.total_steps > 0 for LINEAR_WARMUP (without total_steps the lr stays "
             "constant after warmup)");
}

}  // namespace

const char* to_string(LrScheduleOptions::Type t) {
  switch (t) {
    case SchedType::kConstant: return "CONSTANT";
    case SchedType::kLinearWarmup: return "LINEAR_WARMUP";
    case SchedType::kCosine: return "COSINE";
    case SchedType::kStep: return "STEP";
  }
  return "unknown schedule";
}

LrScheduleOptions LrScheduleOptions::from_config(const config::SchedulerConfig& cfg) {
  using C = config::SchedulerConfig;
  static_assert(static_cast<int>(SchedType::kConstant) == C::CONSTANT &&
                static_cast<int>(SchedType::kLinearWarmup) == C::LINEAR_WARMUP &&
                static_cast<int>(SchedType::kCosine) == C::COSINE && static_cast<int>(SchedType::kStep) == C::STEP);
  LrScheduleOptions o;
  o.type = static_cast<SchedType>(cfg.type());
  o.warmup_steps = cfg.warmup_steps();
  o.total_steps = cfg.total_steps();
  o.min_lr_ratio = cfg.min_lr_ratio();
  o.step_size = cfg.step_size();
  o.gamma = cfg.gamma();
  return o;
}

LrScheduler::LrScheduler(const LrScheduleOptions& options, double base_lr) : cfg_(options), base_lr_(base_lr) {
  check_ranges(cfg_, base_lr_);
  check_consistency(cfg_);
}

LrScheduler::LrScheduler(const config::SchedulerConfig& cfg, double base_lr)
    : LrScheduler(LrScheduleOptions::from_config(cfg), base_lr) {}

double LrScheduler::lr_at(int64_t step) const {
  ZS_REQUIRE(step >= 0, UsageError, "LrScheduler::lr_at: step = ", step, " must be >= 0");
  const int64_t warmup = cfg_.warmup_steps;
  if (step < warmup) {
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const int64_t since = step - warmup;
  const double min_lr = cfg_.min_lr_ratio * base_lr_;
  switch (cfg_.type) {
    case SchedType::kConstant:
      return base_lr_;
    case SchedType::kStep:
      return base_lr_ * std::pow(cfg_.gamma, static_cast<double>(since / cfg_.step_size));
    case SchedType::kLinearWarmup:
    case SchedType::kCosine:
      break;
  }
  if (cfg_.total_steps == 0) return base_lr_;  // LINEAR_WARMUP without an end
  if (step >= cfg_.total_steps) return min_lr;
  const double progress =
      static_cast<double>(since) / static_cast<double>(cfg_.total_steps - warmup);
  if (cfg_.type == SchedType::kLinearWarmup) {
    return base_lr_ * (1 - (1 - cfg_.min_lr_ratio) * progress);
  }
  return min_lr + (base_lr_ - min_lr) * 0.5 * (1 + std::cos(kPi * progress));
}

std::string LrScheduler::describe() const {
  std::string s = std::string(to_string(cfg_.type)) + "(lr=" + format_double(base_lr_) +
                  ", warmup_steps=" + std::to_string(cfg_.warmup_steps);
  switch (cfg_.type) {
    case SchedType::kConstant:
      break;
    case SchedType::kLinearWarmup:
      if (cfg_.total_steps == 0) break;
      [[fallthrough]];
    case SchedType::kCosine:
      s += ", total_steps=" + std::to_string(cfg_.total_steps) +
           ", min_lr_ratio=" + format_double(cfg_.min_lr_ratio);
      break;
    case SchedType::kStep:
      s += ", step_size=" + std::to_string(cfg_.step_size) +
           ", gamma=" + format_double(cfg_.gamma);
      break;
  }
  return s + ")";
}

}  // namespace zeroshard
