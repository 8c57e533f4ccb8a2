// SPDX-License-Identifier: Apache-2.0
// RecordFile: a reserved, checksummed scratch file of fixed-size records. See record_file.h.

#include "zeroshard/store/record_file.h"

#include <unistd.h>

#include <cerrno>

#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/reserve_space.h"

namespace zeroshard {

RecordFile::RecordFile(std::string path, int64_t bytes, int64_t record_bytes, bool direct, Label label)
    : file_(std::move(path), AioFile::kReadWrite | AioFile::kCreate | AioFile::kTruncate, direct),
      bytes_(bytes),
      record_bytes_(record_bytes),
      label_(std::move(label)) {
  ZS_CHECK(bytes > 0 && record_bytes > 0, "RecordFile '", file_.path(), "': ", bytes, " bytes in records of ",
           record_bytes);
  // Reserve the space now, so a drive too small fails here, before training, rather than in the
  // middle of a step (filesystems without fallocate: their free space is checked).
  const int rc = reserve_space(file_.fd(), bytes_, file_.path());
  if (rc != 0) {
    const std::string path_copy = file_.path();
    ::unlink(path_copy.c_str());
    ZS_THROW(IoError, "cannot reserve ", bytes_, " bytes for '", path_copy, "' (", label_.kind, " of unit '",
             label_.unit, "', rank ", label_.rank, "): ", detail::errno_string(rc),
             rc == ENOSPC ? " - the drive under offload.nvme_path is too small for the " + label_.plural : "");
  }
  crc_.assign(static_cast<size_t>((bytes_ + record_bytes_ - 1) / record_bytes_), 0);
}

RecordFile::~RecordFile() { ::unlink(file_.path().c_str()); }

void RecordFile::check_range(int64_t first, int64_t count) const {
  ZS_CHECK(first >= 0 && count > 0 && first + count <= records(), "RecordFile '", file_.path(), "': records [",
           first, ", ", first + count, ") of ", records());
}

int64_t RecordFile::span(int64_t first, int64_t count) const {
  check_range(first, count);
  return (count - 1) * record_bytes_ + record_size(first + count - 1);
}

IoEngine::Handle RecordFile::write(IoEngine& io, int64_t first, int64_t count, const void* data) {
  const int64_t n = span(first, count);
  const auto* p = static_cast<const char*>(data);
  for (int64_t k = first; k < first + count; ++k) {
    crc_[static_cast<size_t>(k)] = crc32c(p + (k - first) * record_bytes_, static_cast<size_t>(record_size(k)));
  }
  return io.submit_write(file_, data, n, first * record_bytes_);
}

IoEngine::Handle RecordFile::read(IoEngine& io, int64_t first, int64_t count, void* data) {
  return io.submit_read(file_, data, span(first, count), first * record_bytes_);
}

void RecordFile::verify(int64_t first, int64_t count, const void* data) const {
  check_range(first, count);
  const auto* p = static_cast<const char*>(data);
  for (int64_t k = first; k < first + count; ++k) {
    const uint32_t got = crc32c(p + (k - first) * record_bytes_, static_cast<size_t>(record_size(k)));
    const uint32_t want = crc_[static_cast<size_t>(k)];
    ZS_REQUIRE(got == want, IoError, "offloaded ", label_.kind, " of unit '", label_.unit, "' corrupted: '",
               file_.path(), "' chunk ", k, " at offset ", k * record_bytes_, " (", record_size(k),
               " bytes) has CRC-32C ", got, ", the engine wrote ", want,
               "; the file was changed or truncated behind the engine's back (rank ", label_.rank,
               "). Restart from the last checkpoint");
  }
}

}  // namespace zeroshard
