// SPDX-License-Identifier: Apache-2.0
// SourceFile: tensor file reads through an IoEngine. See source_file.h.

#include "source_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "tensor_read.h"
#include "zeroshard/base/error.h"

namespace zeroshard::detail {

namespace {

// The readers' own open error first ("cannot open tensor file 'p': No such file or directory
// (errno 2)"), then the file the engine reads.
AioFile open_source(const std::string& path) {
  ::close(open_for_read(path));
  return AioFile(path, AioFile::kRead, /*direct=*/false);
}

}  // namespace

SourceFile::SourceFile(const std::string& path, std::shared_ptr<IoEngine> io)
    : file_(open_source(path)), io_(io ? std::move(io) : shared_reader()), size_(file_.size()) {}

void SourceFile::read(void* dst, int64_t bytes, int64_t offset, const std::string& what) {
  if (bytes <= 0) return;
  // The file's end is known from the open: a range past it is a truncated file, said so before
  // any read (the engine would call it a short read).
  if (offset + bytes > size_) {
    const int64_t at = std::min(offset, size_);
    ZS_THROW(IoError, "tensor file '", path(), "' is truncated: ", what, " needs ", offset + bytes - at,
             " more bytes at offset ", at, " but the file ends there");
  }
  try {
    io_->wait(io_->submit_read(file_, dst, bytes, offset));
  } catch (const IoError& e) {
    ZS_THROW(IoError, "reading ", what, " from '", path(), "' at offset ", offset, " failed: ", e.message());
  }
}

int64_t SourceFile::read_some(void* dst, int64_t bytes, int64_t offset) {
  const int64_t n = std::max<int64_t>(0, std::min(bytes, size_ - offset));
  read(dst, n, offset, "the first bytes");
  return n;
}

std::shared_ptr<IoEngine> shared_reader() {
  static std::once_flag once;
  static std::shared_ptr<IoEngine> engine;
  std::call_once(once, [] { engine = make_io_engine(IoOptions{}); });
  return engine;
}

}  // namespace zeroshard::detail
