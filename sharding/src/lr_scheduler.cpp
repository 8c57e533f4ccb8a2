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

#include "zeroshard/sharding/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "format.h"
#include "zeroshard/core/error.h"

namespace zeroshard {
namespace {

using SchedType = config::SchedulerConfig;
constexpr double kPi = 3.14159265358979323846;

using detail::format_double;

// The schema's ranges (config validation normally catches these first; a SchedulerConfig built in
// code is checked here too).
void check_ranges(const config::SchedulerConfig& c, double base_lr) {
  ZS_REQUIRE(std::isfinite(base_lr) && base_lr >= 0, ConfigError, "optimizer.lr = ",
             format_double(base_lr), " is out of range for the scheduler; allowed: [0, inf)");
  ZS_REQUIRE(c.warmup_steps() >= 0, ConfigError, "scheduler.warmup_steps = ", c.warmup_steps(),
             " is out of range; allowed: >= 0");
  ZS_REQUIRE(c.total_steps() >= 0, ConfigError, "scheduler.total_steps = ", c.total_steps(),
             " is out of range; allowed: >= 0 (0 = unset)");
  ZS_REQUIRE(c.min_lr_ratio() >= 0 && c.min_lr_ratio() <= 1, ConfigError,
             "scheduler.min_lr_ratio = ", format_double(c.min_lr_ratio()),
             " is out of range; allowed: [0, 1]");
  ZS_REQUIRE(c.step_size() >= 1, ConfigError, "scheduler.step_size = ", c.step_size(),
             " is out of range; allowed: >= 1");
  ZS_REQUIRE(c.gamma() > 0 && c.gamma() <= 1, ConfigError, "scheduler.gamma = ",
             format_double(c.gamma()), " is out of range; allowed: (0, 1]");
}

// Cross-field rules: the decay needs an end after the warmup; a minimum needs a decay to reach it.
void check_consistency(const config::SchedulerConfig& c) {
  const std::string type = SchedType::Type_Name(c.type());
  ZS_REQUIRE(c.type() != SchedType::COSINE || c.total_steps() > 0, ConfigError,
             "scheduler.total_steps must be set (> 0) for COSINE: it is the step where the decay "
             "ends");
  ZS_REQUIRE(c.total_steps() == 0 || c.total_steps() > c.warmup_steps(), ConfigError,
             "scheduler.total_steps = ", c.total_steps(), " must exceed scheduler.warmup_steps = ",
             c.warmup_steps(), " for ", type);
  ZS_REQUIRE(c.type() != SchedType::LINEAR_WARMUP || c.total_steps() > 0 || c.min_lr_ratio() == 0,
             ConfigError, "scheduler.min_lr_ratio = ", format_double(c.min_lr_ratio()),
             " needs scheduler.total_steps > 0 for LINEAR_WARMUP (without total_steps the lr stays "
             "constant after warmup)");
}

}  // namespace

LrScheduler::LrScheduler(const config::SchedulerConfig& cfg, double base_lr)
    : cfg_(cfg), base_lr_(base_lr) {
  check_ranges(cfg_, base_lr_);
  check_consistency(cfg_);
}

double LrScheduler::lr_at(int64_t step) const {
  ZS_REQUIRE(step >= 0, UsageError, "LrScheduler::lr_at: step = ", step, " must be >= 0");
  const int64_t warmup = cfg_.warmup_steps();
  if (step < warmup) {
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const int64_t since = step - warmup;
  const double min_lr = cfg_.min_lr_ratio() * base_lr_;
  switch (cfg_.type()) {
    case SchedType::CONSTANT:
      return base_lr_;
    case SchedType::STEP:
      return base_lr_ * std::pow(cfg_.gamma(), static_cast<double>(since / cfg_.step_size()));
    case SchedType::LINEAR_WARMUP:
    case SchedType::COSINE:
      break;
  }
  if (cfg_.total_steps() == 0) return base_lr_;  // LINEAR_WARMUP without an end
  if (step >= cfg_.total_steps()) return min_lr;
  const double progress =
      static_cast<double>(since) / static_cast<double>(cfg_.total_steps() - warmup);
  if (cfg_.type() == SchedType::LINEAR_WARMUP) {
    return base_lr_ * (1 - (1 - cfg_.min_lr_ratio()) * progress);
  }
  return min_lr + (base_lr_ - min_lr) * 0.5 * (1 + std::cos(kPi * progress));
}

std::string LrScheduler::describe() const {
  std::string s = SchedType::Type_Name(cfg_.type()) + "(lr=" + format_double(base_lr_) +
                  ", warmup_steps=" + std::to_string(cfg_.warmup_steps());
  switch (cfg_.type()) {
    case SchedType::CONSTANT:
      break;
    case SchedType::LINEAR_WARMUP:
      if (cfg_.total_steps() == 0) break;
      [[fallthrough]];
    case SchedType::COSINE:
      s += ", total_steps=" + std::to_string(cfg_.total_steps()) +
           ", min_lr_ratio=" + format_double(cfg_.min_lr_ratio());
      break;
    case SchedType::STEP:
      s += ", step_size=" + std::to_string(cfg_.step_size()) +
           ", gamma=" + format_double(cfg_.gamma());
      break;
  }
  return s + ")";
}

}  // namespace zeroshard
