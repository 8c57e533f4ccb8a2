// SPDX-License-Identifier: Apache-2.0
#include "nvme_state.h"

#include <algorithm>

#include "zeroshard/io/offload_dir.h"

namespace zeroshard::detail {

NvmeShardFiles::NvmeShardFiles(const std::string& dir, size_t index, const std::string& unit, int rank,
                               int64_t numel_, int64_t chunk_elems_, int state_arrays, bool master_, bool direct,
                               int generations_)
    : numel(numel_), chunk_elems(chunk_elems_), master(master_), generations(generations_) {
  // As few records as `chunk_elems_` allows, of equal size rounded up to 4 KiB per array (O_DIRECT):
  // a shard of 1.25 blocks takes two records of 0.625 blocks, not two of a block each, so no step
  // reads and writes up to a block per array of padding for every shard.
  constexpr int64_t kAlign = 4096 / static_cast<int64_t>(sizeof(float));
  chunks = (numel + chunk_elems_ - 1) / chunk_elems_;
  if (chunks > 0) {
    const int64_t even = (numel + chunks - 1) / chunks;
    chunk_elems = std::min(chunk_elems_, (even + kAlign - 1) / kAlign * kAlign);
  }
  record_bytes = ((master ? 1 : 0) + state_arrays) * chunk_elems * static_cast<int64_t>(sizeof(float));
  for (int g = 0; g < generations && has_records(); ++g) {
    // The space is reserved now, so a drive too small for the state fails before training.
    files[g] = std::make_unique<RecordFile>(
        dir + "/" + std::to_string(index) + "-" + offload_file_stem(unit) + ".state." + std::to_string(g),
        chunks * record_bytes, record_bytes, direct,
        RecordFile::Label{"optimizer state", "optimizer state", unit, rank});
  }
}

}  // namespace zeroshard::detail
