// SPDX-License-Identifier: Apache-2.0
// A read-only mapping of part of a file (mapped_range.h).

#include "mapped_range.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "zeroshard/base/error.h"

namespace zeroshard::data {

MappedRange::MappedRange(int fd, int64_t offset, int64_t length, const std::string& path) {
  if (length <= 0) return;
  static const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t start = offset / page * page;
  lead_ = offset - start;
  mapped_ = lead_ + length;
  void* p = mmap(nullptr, static_cast<size_t>(mapped_), PROT_READ, MAP_SHARED, fd, start);
  if (p == MAP_FAILED) {
    const int err = errno;
    ZS_THROW(IoError, "cannot map bytes ", offset, "..", offset + length, " of '", path, "': ",
             detail::errno_string(err));
  }
  base_ = static_cast<uint8_t*>(p);
}

MappedRange::~MappedRange() {
  if (base_ != nullptr) munmap(base_, static_cast<size_t>(mapped_));
}

}  // namespace zeroshard::data
