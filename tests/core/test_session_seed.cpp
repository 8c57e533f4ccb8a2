// SPDX-License-Identifier: Apache-2.0
// runtime.seed: the Session seeds LibTorch's default generators at start-up, so a program that
// draws before seeding anything itself gets the same numbers on every rank and in every run.
// Run with --set runtime.seed=77 (tests/CMakeLists.txt); the first draw of this process is here.

#include <ATen/Context.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/rand.h>
#include <gtest/gtest.h>

#include "common/test_util.h"

namespace zeroshard {
namespace {

TEST(SessionSeed, DefaultGeneratorIsSeededFromRuntimeSeed) {
  ASSERT_EQ(test::session().options().seed, 77u);
  const at::Tensor first = at::rand({8});  // drawn from the Session's seeding
  at::manual_seed(77);
  EXPECT_TRUE(at::equal(first, at::rand({8}))) << "the first draw equals a draw right after manual_seed(77)";
  at::manual_seed(78);
  EXPECT_FALSE(at::equal(first, at::rand({8})));
}

}  // namespace
}  // namespace zeroshard
