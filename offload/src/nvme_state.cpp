// SPDX-License-Identifier: Apache-2.0
#include "nvme_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "zeroshard/base/error.h"
#include "zeroshard/io/reserve_space.h"

namespace zeroshard::detail {

NvmeShardFiles::NvmeShardFiles(const std::string& dir, size_t index, const std::string& unit,
                               int64_t numel_, int64_t chunk_elems_, int state_arrays, bool direct, int generations_)
    : numel(numel_), chunk_elems(chunk_elems_), generations(generations_) {
  chunks = (numel + chunk_elems - 1) / chunk_elems;
  record_bytes = (1 + state_arrays) * chunk_elems * static_cast<int64_t>(sizeof(float));
  for (int g = 0; g < generations; ++g) {
    paths[g] = dir + "/" + std::to_string(index) + "-" + offload_file_stem(unit) + ".state." + std::to_string(g);
    files[g] = std::make_unique<AioFile>(paths[g], AioFile::kReadWrite | AioFile::kCreate | AioFile::kTruncate, direct);
    // Reserve the space now, so a disk too small for the state fails here, before training,
    // rather than in the middle of a step (filesystems without fallocate: their free space is checked).
    const int rc = reserve_space(files[g]->fd(), chunks * record_bytes, paths[g]);
    if (rc != 0) {
      ZS_THROW(IoError, "cannot reserve ", chunks * record_bytes, " bytes for '", paths[g],
               "' (offload state of unit '", unit, "'): ", errno_string(rc),
               rc == ENOSPC ? " - the drive under offload.nvme_path is too small for the optimizer state" : "");
    }
    crc[g].assign(static_cast<size_t>(chunks), 0);
  }
}

NvmeShardFiles::~NvmeShardFiles() {
  for (int g = 0; g < generations; ++g) {
    files[g].reset();
    ::unlink(paths[g].c_str());
  }
}

}  // namespace zeroshard::detail
