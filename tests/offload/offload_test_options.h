// SPDX-License-Identifier: Apache-2.0
#pragma once
// Offload settings shared by the offload tests (CPU and GPU): small blocks, so that a shard spans
// several checksum chunks and I/O pieces.

#include <memory>
#include <string>

#include "zeroshard/io/aio.h"
#include "zeroshard/io/fault_io.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"

namespace zs_test {

// Where parameter and gradient shards live, and the folder of their NVMe files.
inline zeroshard::ShardingOptions offload_placement(zeroshard::OffloadTarget params, zeroshard::OffloadTarget grads,
                                                    const std::string& dir) {
  zeroshard::ShardingOptions o;
  for (zeroshard::StoreOptions* p : {&o.offload_params, &o.offload_grads}) {
    p->nvme_path = dir;
    p->block_size = 4096;
    p->queue_depth = 4;
  }
  o.offload_params.target = params;
  o.offload_grads.target = grads;
  return o;
}

// The offloaded optimizer's state at `where`, for parameters placed at `params`.
inline zeroshard::OffloadOptions offload_optimizer_options(zeroshard::OffloadTarget where,
                                                           zeroshard::OffloadTarget params, const std::string& dir) {
  zeroshard::OffloadOptions o;
  o.target = where;
  o.params = params;
  o.nvme_path = dir;
  o.block_size = 4096;
  o.buffer_count = 3;
  o.queue_depth = 4;
  return o;
}

// An I/O engine of the stores' test settings (4096-byte blocks, 4 in flight) that faults on request.
inline std::shared_ptr<zeroshard::FaultInjectingIo> faulty_test_io() {
  zeroshard::IoOptions io;
  io.block_size = 4096;
  io.queue_depth = 4;
  return std::make_shared<zeroshard::FaultInjectingIo>(zeroshard::make_io_engine(io));
}

}  // namespace zs_test
