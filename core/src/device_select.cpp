// SPDX-License-Identifier: Apache-2.0
#include "device_select.h"

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

DeviceChoice select_cuda_device(int local_rank, int local_world_size, int visible, const std::string& host) {
  ZS_REQUIRE(local_world_size >= 1 && local_rank >= 0 && local_rank < local_world_size, UsageError,
             "select_cuda_device: local rank ", local_rank, " of ", local_world_size, " on host ", host,
             " is out of range");
  ZS_REQUIRE(visible >= 1, UsageError, "select_cuda_device: ", visible, " visible GPU(s) on host ", host,
             "; the caller handles a host without GPUs");
  if (visible >= local_world_size) return {local_rank, false};
  if (visible == 1) return {0, true};
  ZS_THROW(ConfigError, "local rank ", local_rank, " of ", local_world_size, " on host ", host, " sees ", visible,
           " GPUs, fewer than the ", local_world_size,
           " ranks of this host: no GPU is left for some ranks. Start at most ", visible,
           " ranks per host, or give each rank its own GPU (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES "
           "set per rank to one device)");
}

void check_distinct_devices(const std::vector<std::string>& ids, const std::string& host) {
  for (size_t a = 0; a < ids.size(); ++a) {
    if (ids[a].empty()) continue;
    for (size_t b = a + 1; b < ids.size(); ++b) {
      ZS_REQUIRE(ids[a] != ids[b], ConfigError, "local ranks ", a, " and ", b, " on host ", host,
                 " each see one GPU, and it is the same GPU (", ids[a],
                 "): ranks would share a device. Give each rank its own GPU (srun --gpus-per-task=1 "
                 "--gpu-bind=single:1, or CUDA_VISIBLE_DEVICES set per rank), or let every rank see all "
                 "of the host's GPUs (each then takes cuda:<local rank>)");
    }
  }
}

void check_same_gpu_counts(const std::vector<int>& counts, const std::string& host) {
  for (size_t r = 1; r < counts.size(); ++r) {
    ZS_REQUIRE(counts[r] == counts[0], ConfigError, "the ranks on host ", host,
               " see different numbers of GPUs: local rank 0 sees ", counts[0], ", local rank ", r, " sees ",
               counts[r], ". Bind GPUs alike for every rank (the same CUDA_VISIBLE_DEVICES for all, or one "
               "GPU per rank with srun --gpus-per-task=1)");
  }
}

}  // namespace zeroshard::detail
