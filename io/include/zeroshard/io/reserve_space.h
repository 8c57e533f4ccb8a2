// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reserving a file's disk space up front, so that a drive too small fails when files are set up
// rather than in the middle of training. posix_fallocate where the filesystem allocates; where it
// cannot (EOPNOTSUPP, or EINVAL from the C library's emulation on an O_DIRECT file), the free
// space of the filesystem (statvfs) is checked instead and a log line says so once per process:
// the space is then not held, only known to be free now.

#include <cstdint>
#include <string>

namespace zeroshard {

// Reserves [0, bytes) of `fd` (the file `path`). Returns 0, ENOSPC when the space is not there
// (also when only the free-space check ran), or another errno from posix_fallocate or statvfs.
int reserve_space(int fd, int64_t bytes, const std::string& path);

}  // namespace zeroshard
