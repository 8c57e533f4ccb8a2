// SPDX-License-Identifier: Apache-2.0
#pragma once
// The files of one rank's offloaded optimizer state on NVMe (private to zs_offload).
//
// Rank directory <nvme_path>/zeroshard-rank<R>/ (an OffloadDir) holds a lock file and, per shard, two state files
// "<index>-<unit>.state.<0|1>". Each file is a sequence of chunk records of `record_bytes` bytes:
// [master C floats | state array 1 C floats | ...], C = chunk elements (Adam: exp_avg, exp_avg_sq;
// SGD: momentum_buffer, or none); the last record is zero-padded. Where the parameter store keeps
// the fp32 master on the drive itself in as many generations (a CPU run with offload.params =
// NVME), the records hold no master: [state array 1 | ...], and plain SGD has no files at all.
// Steps read generation `current` and write the other one, so the previous state survives a
// failed step. Each file is a RecordFile (store/record_file.h): space reserved, a CRC-32C per
// record, verified on every read.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/store/record_file.h"

namespace zeroshard::detail {

struct NvmeShardFiles {
  // `generations`: 2 (files .0 and .1, the step writes the one it does not read) or 1 (one file,
  // updated in place).
  // `master`: the records hold the fp32 master ahead of the state arrays.
  // `chunk_elems`: the most elements per array in a record (the block size); the shard's records
  // are as few as that allows and of equal size, rounded up to 4 KiB per array.
  NvmeShardFiles(const std::string& dir, size_t index, const std::string& unit, int rank, int64_t numel,
                 int64_t chunk_elems, int state_arrays, bool master, bool direct, int generations);

  int64_t numel;
  int64_t chunk_elems;
  bool master;
  int generations;
  int64_t chunks;
  int64_t record_bytes;  // (master + state arrays) * chunk_elems * 4; 0: no files
  std::unique_ptr<RecordFile> files[2];  // per generation
  int current = 0;           // generation holding the state of the last completed step
  bool initialized = false;  // generation `current` has been written once
  int64_t updates = 0;       // completed updates (Adam bias correction)
  bool started = false;      // the state arrays hold values (an update or an import), not the
                             // zeros of initialisation: SGD's first update writes its buffer whole

  bool has_records() const { return record_bytes > 0; }
  int64_t bytes_on_disk() const { return generations * chunks * record_bytes; }
  // Where state array j starts in a record, in floats.
  int64_t state_offset(int j) const { return ((master ? 1 : 0) + j) * chunk_elems; }
  // The generation a step writes: the other one, or the same one when there is only one.
  int next() const { return generations == 2 ? 1 - current : current; }
  int64_t chunk_numel(int64_t k) const { return std::min(chunk_elems, numel - k * chunk_elems); }
};

}  // namespace zeroshard::detail
