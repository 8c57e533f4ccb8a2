// SPDX-License-Identifier: Apache-2.0
// zeroshard::at_least_check (zeroshard/train/trainer.h): the pass/fail checks of training programs.

#include <cmath>
#include <limits>
#include <string>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;

namespace {

zs::TrainResult with_eval(std::vector<double> values) {
  zs::TrainResult r;
  r.final_eval = std::move(values);
  return r;
}

}  // namespace

TEST(AtLeastCheck, PassesAtOrAboveAndFailsBelowOrOnNaN) {
  const auto check = zs::at_least_check(zs::test::session(), 1, "test accuracy", 0.8);
  EXPECT_TRUE(check(with_eval({0.5, 0.8})));
  EXPECT_TRUE(check(with_eval({0.5, 0.95})));
  EXPECT_FALSE(check(with_eval({0.5, 0.7999})));
  EXPECT_FALSE(check(with_eval({0.5, std::numeric_limits<double>::quiet_NaN()})));
}

TEST(AtLeastCheck, AMetricTheTaskDoesNotEvaluateIsAnError) {
  const auto check = zs::at_least_check(zs::test::session(), 1, "test accuracy", 0.8);
  const std::string text = zs::test::error_text_of<zs::UsageError>([&] { check(with_eval({0.5})); });
  EXPECT_TRUE(zs::test::contains(text, "at_least_check: 'test accuracy' is evaluation metric 1 but the task evaluates 1"))
      << text;
}
