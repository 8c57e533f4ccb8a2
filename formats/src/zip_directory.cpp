// SPDX-License-Identifier: Apache-2.0
// The zip central directory (zip_directory.h), after PKWARE's APPNOTE: the end-of-central-directory
// record (EOCD) at the end of the file, the ZIP64 EOCD it may point to, then one header per record.

#include "zip_directory.h"

#include <algorithm>

#include "source_file.h"
#include "zeroshard/base/error.h"

namespace zeroshard::detail {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50, kZip64LocatorSig = 0x07064b50, kZip64EocdSig = 0x06064b50,
                   kEntrySig = 0x02014b50;
constexpr int64_t kEocdBytes = 22, kZip64LocatorBytes = 20, kZip64EocdBytes = 56, kEntryBytes = 46;
constexpr uint32_t kFull32 = 0xffffffffu;

uint64_t le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

[[noreturn]] void damaged(const std::string& path, const std::string& what) {
  ZS_THROW(IoError, "'", path, "' is not a readable zip archive: ", what, " (the file is truncated or damaged)");
}

std::string read_at(SourceFile& file, int64_t offset, int64_t bytes, const char* what) {
  std::string b(static_cast<size_t>(bytes), '\0');
  file.read(b.data(), bytes, offset, what);
  return b;
}

struct DirectoryPlace {
  uint64_t entries = 0, offset = 0, bytes = 0;
};

// The central directory's place, from the EOCD (and the ZIP64 EOCD when the EOCD's fields are full).
DirectoryPlace find_directory(SourceFile& file, int64_t size, const std::string& path) {
  const int64_t tail_bytes = std::min<int64_t>(size, kEocdBytes + 0xffff);
  const std::string tail = read_at(file, size - tail_bytes, tail_bytes, "the zip end record");
  int64_t at = tail_bytes - kEocdBytes;
  while (at >= 0 && le(tail, static_cast<size_t>(at), 4) != kEocdSig) --at;
  if (at < 0) damaged(path, "no end-of-central-directory record");
  const auto e = static_cast<size_t>(at);
  DirectoryPlace d{le(tail, e + 10, 2), le(tail, e + 16, 4), le(tail, e + 12, 4)};
  if (d.entries != 0xffff && d.offset != kFull32 && d.bytes != kFull32) return d;
  const int64_t locator = size - tail_bytes + at - kZip64LocatorBytes;
  if (locator < 0) damaged(path, "no ZIP64 end-of-central-directory locator");
  const std::string loc = read_at(file, locator, kZip64LocatorBytes, "the ZIP64 locator");
  if (le(loc, 0, 4) != kZip64LocatorSig) damaged(path, "no ZIP64 end-of-central-directory locator");
  const uint64_t eocd64 = le(loc, 8, 8);
  if (eocd64 > static_cast<uint64_t>(size - kZip64EocdBytes)) damaged(path, "the ZIP64 end record lies past the end");
  const std::string r = read_at(file, static_cast<int64_t>(eocd64), kZip64EocdBytes, "the ZIP64 end record");
  if (le(r, 0, 4) != kZip64EocdSig) damaged(path, "no ZIP64 end-of-central-directory record");
  return {le(r, 32, 8), le(r, 48, 8), le(r, 40, 8)};
}

// The ZIP64 extra field (id 1) holds, in order, each of the sizes whose 32-bit field is full.
void apply_zip64_extra(const std::string& extra, uint64_t& usize, uint64_t& csize) {
  size_t p = 0;
  while (p + 4 <= extra.size()) {
    const uint64_t id = le(extra, p, 2), len = le(extra, p + 2, 2);
    if (p + 4 + len > extra.size()) return;
    size_t f = p + 4;
    if (id == 1) {
      if (usize == kFull32 && f + 8 <= p + 4 + len) usize = le(extra, f, 8), f += 8;
      if (csize == kFull32 && f + 8 <= p + 4 + len) csize = le(extra, f, 8);
      return;
    }
    p += 4 + len;
  }
}

}  // namespace

std::vector<ZipRecord> read_zip_directory(SourceFile& file) {
  const std::string& path = file.path();
  const int64_t size = file.size();
  if (size < kEocdBytes) damaged(path, std::to_string(size) + " bytes, too short for a zip archive");
  const DirectoryPlace d = find_directory(file, size, path);
  if (d.offset > static_cast<uint64_t>(size) || d.bytes > static_cast<uint64_t>(size) - d.offset) {
    damaged(path, "the central directory lies past the end of the file");
  }
  const std::string dir = read_at(file, static_cast<int64_t>(d.offset), static_cast<int64_t>(d.bytes),
                                  "the zip central directory");
  std::vector<ZipRecord> records;
  size_t p = 0;
  for (uint64_t i = 0; i < d.entries; ++i) {
    if (p + kEntryBytes > dir.size() || le(dir, p, 4) != kEntrySig) damaged(path, "a central directory entry is cut");
    const size_t nlen = le(dir, p + 28, 2), xlen = le(dir, p + 30, 2), clen = le(dir, p + 32, 2);
    if (p + kEntryBytes + nlen + xlen + clen > dir.size()) damaged(path, "a central directory entry is cut");
    uint64_t csize = le(dir, p + 20, 4), usize = le(dir, p + 24, 4);
    apply_zip64_extra(dir.substr(p + kEntryBytes + nlen, xlen), usize, csize);
    ZipRecord r;
    r.name = dir.substr(p + kEntryBytes, nlen);
    r.size = static_cast<int64_t>(usize);
    r.method = static_cast<int>(le(dir, p + 10, 2));
    records.push_back(std::move(r));
    p += kEntryBytes + nlen + xlen + clen;
  }
  return records;
}

}  // namespace zeroshard::detail
