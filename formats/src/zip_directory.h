// SPDX-License-Identifier: Apache-2.0
#pragma once
// The central directory of a zip archive: each record's name, size and compression method (ZIP64
// included). PyTorchStreamReader finds records and where their bytes start but tells neither their
// size nor whether they are compressed; the torch zip reader needs both to read a storage in place.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::detail {

struct ZipRecord {
  std::string name;  // the full name in the archive, e.g. "model/data/0"
  int64_t size = 0;  // uncompressed bytes
  int method = 0;    // 0: stored (uncompressed), 8: deflated, ...
};

class SourceFile;

// Every record of the zip archive `file`, in central directory order. IoError naming the file
// when the end-of-central-directory record or an entry is missing or runs past the end of the file.
std::vector<ZipRecord> read_zip_directory(SourceFile& file);

}  // namespace zeroshard::detail
