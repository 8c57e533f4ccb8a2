// SPDX-License-Identifier: Apache-2.0
#pragma once
// RecordFile: the one on-disk form of every shard that leaves memory for NVMe - offloaded
// parameter and gradient shards (ShardStore) and the offloaded optimizer's state records. A file of
// `bytes` bytes cut into records of `record_bytes` (the last one may be shorter), its space reserved
// when it is created, a CRC-32C per record kept in memory, removed when the RecordFile goes (offload
// files are scratch: a run resumes from checkpoints, never from them).
//
// Writes checksum the records they carry; reads are verified against the checksums of the last
// write, and a record that does not match is an IoError naming the file, the record's index and
// offset, what the file holds (its label) and the rank. So a file changed or cut short behind the
// engine's back is found on the first read and named, whichever layer reads it.
//
// Not thread-safe (the training thread drives it); the I/O engine's thread does the transfers.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/io/aio.h"

namespace zeroshard {

class RecordFile {
 public:
  // Names the file's content in messages: "<kind> of unit '<unit>'", and, when the drive is too
  // small, "... too small for the <plural>".
  struct Label {
    std::string kind;    // "parameter shard", "gradient shard", "optimizer state"
    std::string plural;  // "parameter shards", "gradient shards", "optimizer state"
    std::string unit;
    int rank = 0;
  };
  // Creates (truncating) `path` and reserves `bytes` of disk space: IoError naming the path, the
  // label and the rank when it cannot ("too small for the <plural>" when the drive is full).
  RecordFile(std::string path, int64_t bytes, int64_t record_bytes, bool direct, Label label);
  ~RecordFile();  // closes and removes the file
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  const std::string& path() const { return file_.path(); }
  int64_t bytes() const { return bytes_; }
  int64_t record_bytes() const { return record_bytes_; }
  int64_t records() const { return static_cast<int64_t>(crc_.size()); }
  int64_t record_size(int64_t k) const { return std::min(record_bytes_, bytes_ - k * record_bytes_); }
  // The unit in messages (a unit is renamed once its model is complete; the file keeps its name).
  void rename(const std::string& unit) { label_.unit = unit; }

  // Records [first, first + count) from `data` (their bytes back to back): checksummed, then
  // written. The records hold neither old nor new content until the write's handle completes.
  IoEngine::Handle write(IoEngine& io, int64_t first, int64_t count, const void* data);
  // Starts reading records [first, first + count) into `data`; verify() them once the handle has
  // completed.
  IoEngine::Handle read(IoEngine& io, int64_t first, int64_t count, void* data);
  // Checks records [first, first + count) in `data` against the checksums of their last write.
  void verify(int64_t first, int64_t count, const void* data) const;
  // The bytes of records [first, first + count).
  int64_t span(int64_t first, int64_t count) const;

 private:
  void check_range(int64_t first, int64_t count) const;
  AioFile file_;
  int64_t bytes_;
  int64_t record_bytes_;
  Label label_;
  std::vector<uint32_t> crc_;
};

}  // namespace zeroshard
