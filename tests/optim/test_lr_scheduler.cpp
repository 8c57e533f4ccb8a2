// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules: values at the steps that define each type (warmup start and end, the
// decay's middle and end, STEP boundaries), shape checks over a range, descriptions, and errors
// naming the field.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/error_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/optim/lr_scheduler.h"

namespace zs = zeroshard;
using Sched = zs::LrScheduleOptions;
using Type = zs::LrScheduleOptions::Type;

namespace {

constexpr double kLr = 1e-3;
constexpr double kPi = 3.14159265358979323846;

Sched make(Type type, int64_t warmup, int64_t total = 0, double min_ratio = 0) {
  Sched c;
  c.type = type;
  c.warmup_steps = warmup;
  c.total_steps = total;
  c.min_lr_ratio = min_ratio;
  return c;
}

std::string usage_error(const Sched& c, double lr = kLr) {
  try {
    zs::LrScheduler s(c, lr);
  } catch (const zs::UsageError& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

TEST(LrScheduler, DefaultOptionsAreConstant) {
  zs::LrScheduler s(zs::LrScheduleOptions{}, kLr);
  EXPECT_EQ(s.lr_at(0), kLr);
  EXPECT_EQ(s.lr_at(123456789), kLr);
  EXPECT_EQ(s.describe(), "CONSTANT(lr=0.001, warmup_steps=0)");
}

// Warmup uses lr * (step + 1) / warmup_steps: the first step is not wasted at lr 0 and the last
// warmup step reaches the full lr.
TEST(LrScheduler, WarmupIsLinearFromLrOverWarmupToLr) {
  zs::LrScheduler s(make(Type::kConstant, 4), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(0), kLr * 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(1), kLr * 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(2), kLr * 0.75);
  EXPECT_EQ(s.lr_at(3), kLr);
  EXPECT_EQ(s.lr_at(4), kLr);
  EXPECT_EQ(s.lr_at(1000), kLr);
  EXPECT_GT(s.lr_at(0), 0.0);
}

TEST(LrScheduler, LinearWarmupWithoutTotalStaysConstant) {
  zs::LrScheduler s(make(Type::kLinearWarmup, 10), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(0), kLr / 10);
  EXPECT_EQ(s.lr_at(9), kLr);
  EXPECT_EQ(s.lr_at(10), kLr);
  EXPECT_EQ(s.lr_at(1000000), kLr);
  EXPECT_EQ(s.describe(), "LINEAR_WARMUP(lr=0.001, warmup_steps=10)");
}

TEST(LrScheduler, LinearWarmupDecaysToMinAtTotal) {
  zs::LrScheduler s(make(Type::kLinearWarmup, 10, 110, 0.1), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(0), kLr / 10);
  EXPECT_EQ(s.lr_at(9), kLr);
  EXPECT_EQ(s.lr_at(10), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(60), kLr * (1 - 0.9 * 0.5));
  EXPECT_DOUBLE_EQ(s.lr_at(85), kLr * (1 - 0.9 * 0.75));
  EXPECT_EQ(s.lr_at(110), 0.1 * kLr);
  EXPECT_EQ(s.lr_at(5000), 0.1 * kLr);
  EXPECT_EQ(s.describe(), "LINEAR_WARMUP(lr=0.001, warmup_steps=10, total_steps=110, min_lr_ratio=0.1)");
}

TEST(LrScheduler, CosineAfterWarmup) {
  zs::LrScheduler s(make(Type::kCosine, 100, 1100, 0.1), kLr);
  const double min_lr = 0.1 * kLr;
  EXPECT_DOUBLE_EQ(s.lr_at(0), kLr / 100);
  EXPECT_DOUBLE_EQ(s.lr_at(49), kLr / 2);
  EXPECT_DOUBLE_EQ(s.lr_at(99), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(100), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(350), min_lr + (kLr - min_lr) * 0.5 * (1 + std::cos(kPi / 4)));
  EXPECT_DOUBLE_EQ(s.lr_at(600), min_lr + (kLr - min_lr) * 0.5);
  EXPECT_EQ(s.lr_at(1100), min_lr);
  EXPECT_EQ(s.lr_at(100000), min_lr);
  for (int64_t step = 100; step < 1100; ++step) {
    ASSERT_LE(s.lr_at(step + 1), s.lr_at(step)) << "not non-increasing at " << step;
  }
  for (int64_t step = 0; step < 99; ++step) {
    ASSERT_LT(s.lr_at(step), s.lr_at(step + 1)) << "warmup not increasing at " << step;
  }
  EXPECT_EQ(s.describe(), "COSINE(lr=0.001, warmup_steps=100, total_steps=1100, min_lr_ratio=0.1)");
}

TEST(LrScheduler, CosineWithoutWarmupToZero) {
  zs::LrScheduler s(make(Type::kCosine, 0, 10), 2.0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 2.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 1.0);
  EXPECT_EQ(s.lr_at(10), 0.0);
  EXPECT_EQ(s.lr_at(11), 0.0);
}

TEST(LrScheduler, StepDecaysByGammaEveryStepSizeAfterWarmup) {
  Sched c = make(Type::kStep, 2);
  c.step_size = 3;
  c.gamma = 0.5;
  zs::LrScheduler s(c, kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(0), kLr / 2);
  EXPECT_EQ(s.lr_at(1), kLr);
  EXPECT_EQ(s.lr_at(2), kLr);
  EXPECT_EQ(s.lr_at(4), kLr);
  EXPECT_EQ(s.lr_at(5), kLr * 0.5);
  EXPECT_EQ(s.lr_at(7), kLr * 0.5);
  EXPECT_EQ(s.lr_at(8), kLr * 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(2 + 3 * 10), kLr * std::pow(0.5, 10));
  EXPECT_EQ(s.describe(), "STEP(lr=0.001, warmup_steps=2, step_size=3, gamma=0.5)");
}

// The schedule protects itself against options no valid config gives (config/src/config_rules.cpp
// holds the rules for configs): UsageErrors naming LrScheduleOptions' fields.
TEST(LrScheduler, InconsistentOptionsAreUsageErrorsNamingTheField) {
  EXPECT_CONTAINS(usage_error(make(Type::kCosine, 0, 0)),
                  "LrScheduleOptions.total_steps must be > 0 for type COSINE");
  EXPECT_CONTAINS(usage_error(make(Type::kCosine, 100, 100)),
                  "LrScheduleOptions.total_steps = 100 must exceed warmup_steps = 100 for COSINE");
  EXPECT_CONTAINS(usage_error(make(Type::kLinearWarmup, 50, 20)),
                  "LrScheduleOptions.total_steps = 20 must exceed warmup_steps = 50 for LINEAR_WARMUP");
  EXPECT_CONTAINS(usage_error(make(Type::kLinearWarmup, 10, 0, 0.1)),
                  "LrScheduleOptions.min_lr_ratio = 0.1 needs total_steps > 0 for type LINEAR_WARMUP");
  EXPECT_CONTAINS(usage_error(make(Type::kConstant, -1)),
                  "LrScheduleOptions.warmup_steps = -1 is out of range; allowed: >= 0");
  EXPECT_CONTAINS(usage_error(make(Type::kCosine, 0, 10, 1.5)),
                  "LrScheduleOptions.min_lr_ratio = 1.5 is out of range; allowed: [0, 1]");
  Sched c = make(Type::kStep, 0);
  c.step_size = 0;
  EXPECT_CONTAINS(usage_error(c), "LrScheduleOptions.step_size = 0 is out of range; allowed: >= 1");
  c.step_size = 10;
  c.gamma = 0;
  EXPECT_CONTAINS(usage_error(c), "LrScheduleOptions.gamma = 0 is out of range; allowed: (0, 1]");
  EXPECT_CONTAINS(usage_error(make(Type::kConstant, 0), -1.0), "LrScheduler: base_lr = -1");
}

TEST(LrScheduler, NegativeStepIsAUsageError) {
  zs::LrScheduler s(make(Type::kConstant, 0), kLr);
  try {
    s.lr_at(-1);
    ADD_FAILURE() << "expected a UsageError";
  } catch (const zs::UsageError& e) {
    EXPECT_CONTAINS(e.message(), "step = -1 must be >= 0");
  }
}

}  // namespace
