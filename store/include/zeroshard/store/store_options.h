// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a part of the model state lives between uses, and how a ShardStore reaches its host
// memory or drive. Plain values.

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/io/aio.h"  // IoBackend, IoEngine

namespace zeroshard {

enum class OffloadTarget {
  kDevice,  // DEVICE: on the compute device
  kCpu,     // CPU: pinned host memory
  kNvme,    // NVME: files under offload.nvme_path
};
const char* to_string(OffloadTarget t);  // "DEVICE", "CPU", "NVME"

// Where the shards of one kind (parameters, gradients) live between uses. kDevice: resident, no
// store. kCpu / kNvme: in a ShardStore (shard_store.h).
struct StoreOptions {
  OffloadTarget target = OffloadTarget::kDevice;
  std::string nvme_path;          // NVME: an existing, writable directory
  bool pin_memory = true;         // CPU on CUDA: page-locked host tensors
  int64_t block_size = 1 << 20;   // I/O request size and checksum chunk (a multiple of 4096)
  int queue_depth = 32;
  IoBackend io_backend = IoBackend::kAuto;
  bool direct_io = true;          // O_DIRECT (falls back with a warning where refused)
  std::shared_ptr<IoEngine> io;   // the I/O engine to use; null: built from the fields above
                                  // (tests pass a FaultInjectingIo)
  // NVME: files per shard. 2: an optimizer step writes the generation it does not read, so a
  // failed step can be rolled back (ShardStore::begin_step / commit / abandon); 1: in place.
  int generations = 1;
};

}  // namespace zeroshard
