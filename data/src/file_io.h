// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small file helpers of zs_data: whole-buffer pread/pwrite that name the file in their IoError.
// Private to zs_data. Thread-safety: pread/pwrite on a shared descriptor are thread-safe.

#include <cstdint>
#include <string>

namespace zeroshard::data {

// Reads exactly `bytes` at `offset`; IoError on failure, DataError naming the file when it ends first.
void read_at(int fd, int64_t offset, int64_t bytes, void* out, const std::string& path);
// Writes all of `bytes` at `offset`; IoError on failure.
void write_at(int fd, int64_t offset, int64_t bytes, const void* data, const std::string& path);
// open(2) for reading; IoError naming `what` and the path.
int open_for_reading(const std::string& path, const char* what);
// The size of an open file.
int64_t file_size(int fd, const std::string& path);

}  // namespace zeroshard::data
