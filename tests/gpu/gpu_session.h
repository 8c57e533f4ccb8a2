// SPDX-License-Identifier: Apache-2.0
#pragma once
// The guard of the GPU tests that train on the session's device (label gpu): they run with
// --set runtime.device=AUTO and skip visibly where that resolved to the CPU.

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include "common/test_util.h"

#define ZS_REQUIRE_GPU_SESSION()                                                                      \
  do {                                                                                                \
    if (!at::hasCUDA() || at::getNumGPUs() == 0 || !::zeroshard::test::session().device().is_cuda()) { \
      GTEST_SKIP() << "no CUDA device: GPU test skipped (LibTorch has no CUDA, sees no GPU, or the "  \
                      "session's device is the CPU: run with --set runtime.device=AUTO)";             \
    }                                                                                                 \
  } while (0)
