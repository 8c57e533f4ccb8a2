// SPDX-License-Identifier: Apache-2.0
#pragma once
// MappedRange: a read-only mapping of bytes [offset, offset + length) of an open file, unmapped
// when the object goes. The mapping starts at the page below `offset`; data() points at `offset`.
// Private to zs_data. Thread-safety: a value owned by one thread.

#include <cstdint>
#include <string>

namespace zeroshard::data {

class MappedRange {
 public:
  // IoError naming `path` when mmap fails. length 0 maps nothing.
  MappedRange(int fd, int64_t offset, int64_t length, const std::string& path);
  ~MappedRange();
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  const uint8_t* data() const { return base_ + lead_; }

 private:
  uint8_t* base_ = nullptr;
  int64_t lead_ = 0;     // bytes between the page boundary and `offset`
  int64_t mapped_ = 0;   // bytes mapped
};

}  // namespace zeroshard::data
