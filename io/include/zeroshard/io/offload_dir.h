// SPDX-License-Identifier: Apache-2.0
#pragma once
// OffloadDir: one rank's directory of offload files under offload.nvme_path, shared by the
// offloaded optimizer state (zeroshard-rank<R>/) and the offloaded parameter shards
// (zeroshard-params-rank<R>/).
//
// Created at construction (the parent must exist and be writable: IoError naming it otherwise),
// locked with flock against a second process (or a second store of the same kind in this one),
// and cleared of the files an earlier run left (names containing `stale_marker`: offload files
// are never read back, a run resumes from checkpoints). The destructor removes the lock file and
// the directory if it is empty.

#include <string>

namespace zeroshard {

class OffloadDir {
 public:
  // <nvme_path>/<name><rank>, e.g. name "zeroshard-rank" -> ".../zeroshard-rank3". `what` names
  // the contents in messages ("optimizer state", "parameter shards").
  OffloadDir(const std::string& nvme_path, const std::string& name, int rank, const std::string& stale_marker,
             const std::string& what);
  ~OffloadDir();
  OffloadDir(const OffloadDir&) = delete;
  OffloadDir& operator=(const OffloadDir&) = delete;
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  std::string lock_path_;
  int lock_fd_ = -1;
};

// A unit or tensor name made safe for a file name: [A-Za-z0-9_.], others '_', at most 80 chars.
std::string offload_file_stem(const std::string& name);

}  // namespace zeroshard
