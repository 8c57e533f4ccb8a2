// SPDX-License-Identifier: Apache-2.0
#pragma once
// SessionOptions: what a Session starts with (device policy, seed, communicator settings, logging,
// memory accounting), as plain values. A default SessionOptions equals what
// zeroshard/config/resolve.h makes of the default config (tests/config/test_resolve.cpp holds
// this); the config edge fills it from the runtime, comm, logging and memory sections.

#include <cstdint>
#include <string>

#include "zeroshard/base/logging.h"  // LogSettings
#include "zeroshard/comm/communicator.h"  // CommOptions

namespace zeroshard {

// Which device a rank computes on.
enum class DevicePolicy {
  kAuto,  // AUTO: cuda:<local rank> when LibTorch sees a GPU, else the CPU
  kCpu,   // CPU
  kCuda,  // CUDA: a GPU, an error where there is none
};
const char* to_string(DevicePolicy d);  // "AUTO", "CPU", "CUDA"

// Which backend carries the collectives of device tensors (Session::device_world).
enum class CommBackend {
  kAuto,  // AUTO: NCCL when the device is CUDA, MPI otherwise
  kMpi,   // MPI: CPU tensors only
  kNccl,  // NCCL: CUDA tensors only
};
const char* to_string(CommBackend b);  // "AUTO", "MPI", "NCCL"

// Memory accounting, the limit and out-of-memory reports (memory_report.h, docs/memory.md).
struct MemoryOptions {
  int64_t limit_mib = 0;           // this rank's tensors on its compute device, in MiB; 0: no limit
  bool track_allocations = true;   // the tracking host allocator (phases in out-of-memory reports)
  std::string snapshot_dir;        // where zeroshard-oom-rank<R>.json goes; empty: the working directory
  int top_allocations = 10;        // largest live allocations an out-of-memory report lists
  // Freed host blocks >= 128 KiB kept for reuse (host_memory.h), in MiB; 0: none. Installs the
  // tracking allocator when non-zero.
  int64_t host_cache_mib = 256;
  // An engine on a CPU run raises the cache to 4 x the fp32 bytes of its largest unit when that is
  // more (its per-step buffers, gathered parameters and unsharded gradients among them, are that
  // size); false: host_cache_mib is the size (resolve() sets false when the config sets it).
  bool host_cache_grows = true;
  // What the out-of-memory report names as the limit's origin; empty: "MemoryOptions.limit_mib = N".
  std::string limit_source;
};

struct SessionOptions {
  DevicePolicy device = DevicePolicy::kAuto;
  // LibTorch's default generators are seeded with it at start-up (the same on every rank).
  uint64_t seed = 1234;
  // Every communicator the Session opens (timeout, abort_on_timeout, check_signatures,
  // reduce_scatter_ring; the Session sets the name and, on an oversubscribed host, the polling).
  CommOptions comm;
  CommBackend comm_backend = CommBackend::kAuto;
  // The flight recorder (zeroshard/comm/flight_recorder.h): entries kept per rank (0: off) and
  // where the dumps go.
  int64_t flight_recorder_entries = 4096;
  std::string flight_recorder_dir = "zeroshard-flight";
  // Applied at start-up; ZS_LOG_LEVEL / ZS_LOG_RANKS in the environment win.
  LogSettings log;
  MemoryOptions memory;
};

}  // namespace zeroshard
