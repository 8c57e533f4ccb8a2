// SPDX-License-Identifier: Apache-2.0
// Which CUDA device a rank takes (core/src/device_select.h): the rule the Session applies to what
// each rank sees, checked without a GPU. The cases are the launches users run: mpirun on a host
// whose ranks all see every GPU, and srun with one GPU bound per task (Slurm sets
// CUDA_VISIBLE_DEVICES to that one GPU for each task, so every rank sees one device, numbered 0).

#include <string>
#include <vector>

#include "common/test_util.h"
#include "device_select.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
using zs::detail::select_cuda_device;

namespace {
std::string config_error_of(const std::function<void()>& f) { return zs::test::error_text_of<zs::ConfigError>(f); }
bool has(const std::string& text, const std::string& part) { return zs::test::contains(text, part); }
}  // namespace

TEST(DeviceSelect, EveryRankSeesEveryGpuTakesItsLocalRank) {
  for (int r = 0; r < 4; ++r) {
    const auto c = select_cuda_device(r, 4, 4, "node1");
    EXPECT_EQ(c.index, r);
    EXPECT_FALSE(c.one_per_rank);
  }
  EXPECT_EQ(select_cuda_device(1, 2, 8, "node1").index, 1);  // more GPUs than ranks
  EXPECT_EQ(select_cuda_device(0, 1, 1, "node1").index, 0);
}

TEST(DeviceSelect, SlurmOneGpuPerTaskGivesEveryLocalRankItsOnlyDevice) {
  // srun --ntasks-per-node=4 --gpus-per-task=1: SLURM_LOCALID 0..3, each sees one GPU.
  for (int r = 0; r < 4; ++r) {
    const auto c = select_cuda_device(r, 4, 1, "gpu-node-7");
    EXPECT_EQ(c.index, 0) << "local rank " << r;
    EXPECT_TRUE(c.one_per_rank) << "local rank " << r;
  }
}

TEST(DeviceSelect, FewerGpusThanRanksIsAConfigErrorNamingHostRankAndCounts) {
  const std::string e = config_error_of([] { select_cuda_device(3, 4, 2, "gpu-node-7"); });
  EXPECT_TRUE(has(e, "local rank 3 of 4 on host gpu-node-7 sees 2 GPUs")) << e;
  EXPECT_TRUE(has(e, "--gpus-per-task=1")) << e;
}

TEST(DeviceSelect, OutOfRangeArgumentsAreUsageErrors) {
  EXPECT_THROW(select_cuda_device(2, 2, 2, "h"), zs::UsageError);
  EXPECT_THROW(select_cuda_device(-1, 2, 2, "h"), zs::UsageError);
  EXPECT_THROW(select_cuda_device(0, 1, 0, "h"), zs::UsageError);
}

TEST(DeviceSelect, RanksGivenTheSameGpuAreAConfigErrorNamingBoth) {
  zs::detail::check_distinct_devices({"0000:41:00.0", "0000:61:00.0", "0000:81:00.0"}, "h");
  zs::detail::check_distinct_devices({"", ""}, "h");  // ids unknown: nothing to compare
  const std::string e = config_error_of(
      [] { zs::detail::check_distinct_devices({"0000:41:00.0", "0000:61:00.0", "0000:41:00.0"}, "gpu-node-7"); });
  EXPECT_TRUE(has(e, "local ranks 0 and 2 on host gpu-node-7")) << e;
  EXPECT_TRUE(has(e, "0000:41:00.0")) << e;
}

TEST(DeviceSelect, RanksOfAHostSeeingDifferentCountsAreAConfigError) {
  zs::detail::check_same_gpu_counts({1, 1, 1}, "h");
  zs::detail::check_same_gpu_counts({0, 0}, "h");
  const std::string e = config_error_of([] { zs::detail::check_same_gpu_counts({4, 4, 1}, "gpu-node-7"); });
  EXPECT_TRUE(has(e, "host gpu-node-7")) << e;
  EXPECT_TRUE(has(e, "local rank 0 sees 4, local rank 2 sees 1")) << e;
}
