// SPDX-License-Identifier: Apache-2.0
#pragma once
// Module buffers (BatchNorm running statistics) kept in step across ranks with one collective
// for all of them, not one per buffer (a ResNet-50 has about a hundred). Private to the engine.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::detail {

// Every buffer becomes `root`'s: the buffers' bytes packed into one tensor and broadcast once.
// Collective over `comm`; buffers must be on its device.
void broadcast_buffers(Communicator& comm, const std::vector<at::Tensor>& buffers, int root, const std::string& tag);

// Floating buffers become their average over the ranks: one all-reduce per floating dtype present
// (one for the usual model). Integer buffers (num_batches_tracked) are left as they are: they
// count the same on every rank. Collective over `comm`.
void average_buffers(Communicator& comm, const std::vector<at::Tensor>& buffers, const std::string& tag);

}  // namespace zeroshard::detail
