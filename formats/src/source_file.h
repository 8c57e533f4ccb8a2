// SPDX-License-Identifier: Apache-2.0
#pragma once
// SourceFile: a tensor file opened for reading, every read going through an IoEngine (the process's
// shared reader engine unless one is given). So the format readers read through the same interface
// as the offload and checkpoint paths, and a FaultInjectingIo handed to open_tensor_file() reaches
// them: a failed or short read surfaces as the parser's own IoError, naming the file and what was
// being read. Private to zs_formats. One thread at a time.

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/io/aio.h"

namespace zeroshard::detail {

class SourceFile {
 public:
  // Opens `path` (IoError naming it: "cannot open tensor file ..."); `io` null: shared_reader().
  SourceFile(const std::string& path, std::shared_ptr<IoEngine> io);
  const std::string& path() const { return file_.path(); }
  int64_t size() const { return size_; }  // when opened
  const std::shared_ptr<IoEngine>& io() const { return io_; }
  // Exactly `bytes` at `offset`; IoError naming the file and `what` (e.g. "tensor 'w'") when the
  // file ends first ("is truncated: ... needs N more bytes at offset X but the file ends there") or
  // the read fails.
  void read(void* dst, int64_t bytes, int64_t offset, const std::string& what);
  // Up to `bytes` at `offset` (fewer where the file ends); the count read.
  int64_t read_some(void* dst, int64_t bytes, int64_t offset);

 private:
  AioFile file_;
  std::shared_ptr<IoEngine> io_;
  int64_t size_ = 0;
};

// The engine tensor files read through unless given one: made once per process (the I/O engine's
// default backend), kept for its life.
std::shared_ptr<IoEngine> shared_reader();

}  // namespace zeroshard::detail
