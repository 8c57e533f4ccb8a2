// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which CUDA device a rank takes, from what it can see. Private to zs_core (Session::pick_device);
// a pure function so the rule is tested without a GPU (tests/core/test_device_select.cpp).
//
// The rule, for `visible` GPUs seen by a rank that is local rank `local_rank` of
// `local_world_size` ranks on its host:
//   visible >= local_world_size   cuda:<local_rank>: the ranks share one view of the host's GPUs
//                                 (mpirun, srun without GPU binding).
//   visible == 1                  cuda:0: each rank was given its own GPU (srun --gpus-per-task=1,
//                                 --gpu-bind, or a CUDA_VISIBLE_DEVICES per rank). The Session then
//                                 checks that no two ranks of the host got the same GPU.
//   otherwise                     ConfigError: fewer GPUs than ranks, and more than one visible, so
//                                 no rule maps ranks to distinct devices.
// `visible` == 0 is handled by the caller (CPU for runtime.device AUTO, an error for CUDA).

#include <string>
#include <vector>

namespace zeroshard::detail {

struct DeviceChoice {
  int index = 0;             // the CUDA device index, in this process's numbering
  bool one_per_rank = false; // chosen by the "each rank sees its own GPU" rule: check distinctness
};

// ConfigError naming the host, the local rank, the counts and what to do, for an impossible
// mapping or a negative/out-of-range argument.
DeviceChoice select_cuda_device(int local_rank, int local_world_size, int visible, const std::string& host);

// Where two ranks of a host were given the same GPU (by `ids`, one per local rank: e.g. PCI bus
// ids), the ConfigError that says so; no-op when every id differs. Empty ids are not compared.
void check_distinct_devices(const std::vector<std::string>& ids, const std::string& host);

// ConfigError when the ranks of a host (`counts`, one per local rank) see different numbers of
// GPUs: the launcher bound GPUs to some ranks and not others, and no rule fits them all.
void check_same_gpu_counts(const std::vector<int>& counts, const std::string& host);

}  // namespace zeroshard::detail
