// SPDX-License-Identifier: Apache-2.0
#include "nvme_state.h"

#include "zeroshard/io/offload_dir.h"

namespace zeroshard::detail {

NvmeShardFiles::NvmeShardFiles(const std::string& dir, size_t index, const std::string& unit, int rank,
                               int64_t numel_, int64_t chunk_elems_, int state_arrays, bool master_, bool direct,
                               int generations_)
    : numel(numel_), chunk_elems(chunk_elems_), master(master_), generations(generations_) {
  chunks = (numel + chunk_elems - 1) / chunk_elems;
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
