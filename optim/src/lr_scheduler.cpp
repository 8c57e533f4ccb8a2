// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules (see lr_scheduler.h).
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

namespace zeroshard {
namespace {

using SchedType = LrScheduleOptions::Type;
constexpr double kPi = 3.14159265358979323846;


// What the schedule needs to be defined (a valid config gives it: config/src/config_rules.cpp).
void check_options(const LrScheduleOptions& c, double base_lr) {
  ZS_REQUIRE(std::isfinite(base_lr) && base_lr >= 0, UsageError, "LrScheduler: base_lr = ", format_double(base_lr),
             " is out of range; allowed: [0, inf)");
  auto bad = [](const char* field, const std::string& value, const char* allowed) {
    ZS_THROW(UsageError, "LrScheduleOptions.", field, " = ", value, " is out of range; allowed: ", allowed);
  };
  if (c.warmup_steps < 0) bad("warmup_steps", std::to_string(c.warmup_steps), ">= 0");
  if (c.total_steps < 0) bad("total_steps", std::to_string(c.total_steps), ">= 0 (0 = unset)");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) bad("min_lr_ratio", format_double(c.min_lr_ratio), "[0, 1]");
  if (c.step_size < 1) bad("step_size", std::to_string(c.step_size), ">= 1");
  if (!(c.gamma > 0 && c.gamma <= 1)) bad("gamma", format_double(c.gamma), "(0, 1]");
  const char* type = to_string(c.type);
  ZS_REQUIRE(c.type != SchedType::kCosine || c.total_steps > 0, UsageError,
             "LrScheduleOptions.total_steps must be > 0 for type COSINE: it is the step where the decay ends");
  ZS_REQUIRE(c.total_steps == 0 || c.total_steps > c.warmup_steps, UsageError, "LrScheduleOptions.total_steps = ",
             c.total_steps, " must exceed warmup_steps = ", c.warmup_steps, " for ", type);
  ZS_REQUIRE(c.type != SchedType::kLinearWarmup || c.total_steps > 0 || c.min_lr_ratio == 0, UsageError,
             "LrScheduleOptions.min_lr_ratio = ", format_double(c.min_lr_ratio),
             " needs total_steps > 0 for type LINEAR_WARMUP (without it the lr stays constant after warmup)");
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

LrScheduler::LrScheduler(const LrScheduleOptions& options, double base_lr) : cfg_(options), base_lr_(base_lr) {
  check_options(cfg_, base_lr_);
}

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
