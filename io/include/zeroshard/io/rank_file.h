// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checkpoint rank files: the 16-byte magic "ZSHARD-RANKFILE1", raw sections (little-endian tensor
// bytes, each with a CRC-32C), then the index of the sections. Whoever writes the file keeps its
// RankFileRecord (size, index position, checksums) elsewhere (the checkpoint's manifest), and the
// reader checks the file against it. Both go through an IoEngine (aio.h), the I/O stack the NVMe
// offload uses, so a FaultInjectingIo makes checkpoints fail the way a full or broken disk would.
//
// Every error is a CheckpointError naming the file (and the section and offset where it applies);
// failures of the I/O engine are passed on with its text ("disk full: write of ... failed: No
// space left on device"). Not thread-safe: one thread per writer or reader.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/io/aio.h"

namespace zeroshard {

inline constexpr char kRankFileMagic[17] = "ZSHARD-RANKFILE1";

struct RankFileSection {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // bytes from the start of the file
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// What the writer reports and the reader checks: the file as a whole.
struct RankFileRecord {
  int rank = 0;        // world rank that wrote it
  int shard_rank = 0;  // its rank in the shard group
  std::string file;    // name inside the checkpoint directory
  int64_t bytes = 0;
  uint32_t crc32c = 0;  // CRC-32C of magic + index (the index holds each section's CRC)
  int64_t index_offset = 0;
  int64_t index_bytes = 0;
  uint32_t index_crc32c = 0;
};

// Writes one rank file sequentially: sections, then the index; computes every CRC as it goes.
class RankFileWriter {
 public:
  // Creates (or truncates) `path`. `io`: the engine to write through (null: a default engine).
  RankFileWriter(std::string path, int rank, int shard_rank, std::shared_ptr<IoEngine> io = nullptr);
  ~RankFileWriter();  // closes (does not delete) an unfinished file
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const void* data, int64_t bytes);
  // Writes the index, syncs the file to the disk and closes it; returns its record.
  RankFileRecord finish(const std::string& file_name);

 private:
  void write(const void* data, int64_t bytes);
  std::string path_;
  std::shared_ptr<IoEngine> io_;
  std::unique_ptr<AioFile> file_;
  int rank_;
  int shard_rank_;
  std::vector<RankFileSection> sections_;
  int64_t offset_ = 0;
};

// Reads sections of one rank file, checking it against its record: size and index checksum at
// open, each section's checksum when read.
class RankFileReader {
 public:
  RankFileReader(std::string path, const RankFileRecord& expected, std::shared_ptr<IoEngine> io = nullptr);
  ~RankFileReader();
  RankFileReader(const RankFileReader&) = delete;
  RankFileReader& operator=(const RankFileReader&) = delete;

  int rank() const { return rank_; }
  int shard_rank() const { return shard_rank_; }
  const std::vector<RankFileSection>& sections() const { return sections_; }
  bool has(const std::string& name) const;
  const RankFileSection& section(const std::string& name) const;  // CheckpointError if absent
  // The whole section into `dst` (section.bytes bytes), checksum verified.
  void read(const RankFileSection& s, void* dst) const;
  std::string read_bytes(const std::string& name) const;
  // Bytes [begin, begin + bytes) of section `s` into `dst`, NOT checksummed: for readers that
  // stream a section in pieces and check its CRC-32C themselves (crc32c() extended over every
  // piece, in order, must equal s.crc32c at the section's end). CheckpointError outside the section.
  void read_part(const RankFileSection& s, int64_t begin, int64_t bytes, void* dst) const;
  // Section `s`'s checksum, streamed in pieces of at most 16 MiB (nothing else is kept).
  void verify_section(const RankFileSection& s) const;
  // The file's CRC (magic + index) against the record, every section's CRC, and that the
  // sections and index cover the file (reads it once).
  void verify_file() const;
  const std::string& path() const { return path_; }

 private:
  void read_at(void* dst, int64_t bytes, int64_t offset) const;
  std::string path_;
  RankFileRecord expected_;
  std::shared_ptr<IoEngine> io_;
  std::unique_ptr<AioFile> file_;
  int rank_ = 0;
  int shard_rank_ = 0;
  std::vector<RankFileSection> sections_;
};

// Writes <dir>/<name> atomically through `io`: a temporary file, synced, renamed over the name,
// then the directory synced. CheckpointError naming the file.
void write_file_atomic(IoEngine& io, const std::string& dir, const std::string& name, const std::string& contents);
// fsync of a directory (after creating or renaming entries in it). CheckpointError naming it.
void fsync_dir(const std::string& dir);

// The engine rank files use when none is given: buffered I/O (no O_DIRECT), io_uring where the
// kernel allows it, else libaio, else threads. One per process, made on first use.
std::shared_ptr<IoEngine> default_file_io();

}  // namespace zeroshard
