// SPDX-License-Identifier: Apache-2.0
// Rank files through the I/O engine (rank_file.h): the writer appends sections and the index, the
// reader checks the file against its record and every section against its CRC-32C.

#include "zeroshard/io/rank_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "rank_file.pb.h"
#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

std::shared_ptr<IoEngine> engine_or_default(std::shared_ptr<IoEngine> io) {
  return io != nullptr ? std::move(io) : default_file_io();
}

// Runs `fn`; an IoError (from the engine or the file) becomes a CheckpointError with its text.
template <typename Fn>
auto as_checkpoint_error(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const IoError& e) {
    throw CheckpointError(e.message(), e.file().c_str(), e.line());
  }
}

}  // namespace

std::shared_ptr<IoEngine> default_file_io() {
  static std::mutex mu;
  static std::shared_ptr<IoEngine> engine;
  std::lock_guard<std::mutex> lock(mu);
  if (engine == nullptr) engine = std::shared_ptr<IoEngine>(make_io_engine(IoOptions{}));
  return engine;
}

// ---- writer ----

RankFileWriter::RankFileWriter(std::string path, int rank, int shard_rank, std::shared_ptr<IoEngine> io)
    : path_(std::move(path)), io_(engine_or_default(std::move(io))), rank_(rank), shard_rank_(shard_rank) {
  file_ = as_checkpoint_error([&] {
    return std::make_unique<AioFile>(path_, AioFile::kReadWrite | AioFile::kCreate | AioFile::kTruncate,
                                     /*direct=*/false);
  });
  write(kRankFileMagic, 16);
}

RankFileWriter::~RankFileWriter() = default;

void RankFileWriter::write(const void* data, int64_t bytes) {
  ZS_REQUIRE(file_ != nullptr, UsageError, "RankFileWriter: '", path_, "' is already finished");
  as_checkpoint_error([&] { io_->wait(io_->submit_write(*file_, data, bytes, offset_)); });
  offset_ += bytes;
}

void RankFileWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                         const void* data, int64_t bytes) {
  RankFileSection s;
  s.name = name;
  s.dtype = dtype;
  s.shape = shape;
  s.offset = offset_;
  s.bytes = bytes;
  s.crc32c = crc32c(data, static_cast<size_t>(bytes));
  write(data, bytes);
  sections_.push_back(std::move(s));
}

RankFileRecord RankFileWriter::finish(const std::string& file_name) {
  io::RankFileIndex index;
  index.set_rank(rank_);
  index.set_shard_rank(shard_rank_);
  for (const RankFileSection& s : sections_) {
    io::RankFileSection* p = index.add_sections();
    p->set_name(s.name);
    p->set_dtype(s.dtype);
    for (int64_t d : s.shape) p->add_shape(d);
    p->set_offset(s.offset);
    p->set_bytes(s.bytes);
    p->set_crc32c(s.crc32c);
  }
  const std::string idx = index.SerializeAsString();
  RankFileRecord rf;
  rf.rank = rank_;
  rf.shard_rank = shard_rank_;
  rf.file = file_name;
  rf.index_offset = offset_;
  rf.index_bytes = static_cast<int64_t>(idx.size());
  rf.index_crc32c = crc32c(idx.data(), idx.size());
  // The file's checksum covers the magic and the index, which holds every section's CRC: one
  // pass over the data computes both, and verify checks every byte through the sections.
  rf.crc32c = crc32c(idx.data(), idx.size(), crc32c(kRankFileMagic, 16));
  write(idx.data(), static_cast<int64_t>(idx.size()));
  as_checkpoint_error([&] { file_->sync(); });
  file_.reset();
  rf.bytes = offset_;
  return rf;
}

// ---- reader ----

RankFileReader::RankFileReader(std::string path, const RankFileRecord& expected, std::shared_ptr<IoEngine> io)
    : path_(std::move(path)), expected_(expected), io_(engine_or_default(std::move(io))) {
  try {
    file_ = std::make_unique<AioFile>(path_, AioFile::kRead, /*direct=*/false);
  } catch (const IoError& e) {
    ZS_THROW(CheckpointError, "checkpoint rank file '", path_, "' (shard rank ", expected.shard_rank,
             ") cannot be opened: ", e.message());
  }
  const int64_t size = as_checkpoint_error([&] { return file_->size(); });
  ZS_REQUIRE(size == expected.bytes, CheckpointError, "checkpoint rank file '", path_, "' has ", size,
             " bytes, the manifest recorded ", expected.bytes, size < expected.bytes ? " (truncated)" : "");
  char magic[16];
  read_at(magic, 16, 0);
  ZS_REQUIRE(std::memcmp(magic, kRankFileMagic, 16) == 0, CheckpointError, "'", path_,
             "' is not a zeroshard rank file (bad magic)");
  ZS_REQUIRE(expected.index_offset >= 16 && expected.index_bytes >= 0 && expected.index_offset <= size &&
                 expected.index_bytes <= size - expected.index_offset,
             CheckpointError, "checkpoint rank file '", path_, "': its index (", expected.index_bytes,
             " bytes at offset ", expected.index_offset, ") lies outside its ", size, " bytes");
  std::string idx(static_cast<size_t>(expected.index_bytes), '\0');
  read_at(idx.data(), expected.index_bytes, expected.index_offset);
  const uint32_t crc = crc32c(idx.data(), idx.size());
  ZS_REQUIRE(crc == expected.index_crc32c, CheckpointError, "checksum mismatch in the index of '", path_,
             "' at offset ", expected.index_offset, " (CRC-32C ", crc, ", manifest says ", expected.index_crc32c,
             "): the file was changed or damaged");
  io::RankFileIndex index;
  ZS_REQUIRE(index.ParseFromString(idx), CheckpointError, "the index of '", path_, "' does not parse");
  rank_ = index.rank();
  shard_rank_ = index.shard_rank();
  for (const io::RankFileSection& p : index.sections()) {
    // Between the magic and the index, like every section the writer makes.
    ZS_REQUIRE(p.offset() >= 16 && p.bytes() >= 0 && p.offset() <= expected.index_offset &&
                   p.bytes() <= expected.index_offset - p.offset(),
               CheckpointError, "checkpoint rank file '", path_, "': section '", p.name(), "' (", p.bytes(),
               " bytes at offset ", p.offset(), ") lies outside the data before the index at offset ",
               expected.index_offset);
    sections_.push_back({p.name(), p.dtype(), std::vector<int64_t>(p.shape().begin(), p.shape().end()), p.offset(),
                         p.bytes(), p.crc32c()});
  }
}

RankFileReader::~RankFileReader() = default;

void RankFileReader::read_at(void* dst, int64_t bytes, int64_t offset) const {
  ZS_REQUIRE(offset >= 0 && bytes >= 0 && offset <= expected_.bytes && bytes <= expected_.bytes - offset, CheckpointError, "checkpoint file '",
             path_, "' is truncated: it ends before offset ", offset + bytes, " (", bytes, " bytes at offset ", offset,
             " expected)");
  as_checkpoint_error([&] { io_->wait(io_->submit_read(*file_, dst, bytes, offset)); });
}

bool RankFileReader::has(const std::string& name) const {
  for (const RankFileSection& s : sections_) {
    if (s.name == name) return true;
  }
  return false;
}

const RankFileSection& RankFileReader::section(const std::string& name) const {
  for (const RankFileSection& s : sections_) {
    if (s.name == name) return s;
  }
  ZS_THROW(CheckpointError, "checkpoint file '", path_, "' has no section '", name, "'");
}

void RankFileReader::read(const RankFileSection& s, void* dst) const {
  read_at(dst, s.bytes, s.offset);
  const uint32_t crc = crc32c(dst, static_cast<size_t>(s.bytes));
  ZS_REQUIRE(crc == s.crc32c, CheckpointError, "checksum mismatch in '", path_, "', section '", s.name,
             "' at offset ", s.offset, " (", s.bytes, " bytes): CRC-32C ", crc, ", expected ", s.crc32c,
             "; the file is damaged");
}

void RankFileReader::read_part(const RankFileSection& s, int64_t begin, int64_t bytes, void* dst) const {
  ZS_REQUIRE(begin >= 0 && bytes >= 0 && begin <= s.bytes && bytes <= s.bytes - begin, CheckpointError, "'", path_, "', section '", s.name,
             "': bytes [", begin, ", ", begin + bytes, ") lie outside its ", s.bytes, " bytes");
  read_at(dst, bytes, s.offset + begin);
}

void RankFileReader::verify_section(const RankFileSection& s) const {
  constexpr int64_t kPiece = 16 << 20;
  std::vector<char> piece(static_cast<size_t>(std::min<int64_t>(kPiece, s.bytes)));
  uint32_t crc = 0;
  for (int64_t done = 0; done < s.bytes;) {
    const int64_t n = std::min<int64_t>(kPiece, s.bytes - done);
    read_at(piece.data(), n, s.offset + done);
    crc = crc32c(piece.data(), static_cast<size_t>(n), crc);
    done += n;
  }
  ZS_REQUIRE(crc == s.crc32c, CheckpointError, "checksum mismatch in '", path_, "', section '", s.name,
             "' at offset ", s.offset, " (", s.bytes, " bytes): CRC-32C ", crc, ", expected ", s.crc32c,
             "; the file is damaged");
}

std::string RankFileReader::read_bytes(const std::string& name) const {
  const RankFileSection& s = section(name);
  std::string out(static_cast<size_t>(s.bytes), '\0');
  read(s, out.data());
  return out;
}

void RankFileReader::verify_file() const {
  // Magic and index were checked at open (the index against the record's CRC); the file CRC is
  // the magic's and the index's, checked here, then every section's bytes.
  std::string raw(static_cast<size_t>(expected_.index_bytes), '\0');
  read_at(raw.data(), expected_.index_bytes, expected_.index_offset);
  const uint32_t file_crc = crc32c(raw.data(), raw.size(), crc32c(kRankFileMagic, 16));
  ZS_REQUIRE(file_crc == expected_.crc32c, CheckpointError, "checksum mismatch in '", path_, "': CRC-32C ", file_crc,
             ", the manifest recorded ", expected_.crc32c, "; the file is damaged");
  int64_t covered = 16 + expected_.index_bytes;
  for (const RankFileSection& s : sections_) {
    std::vector<char> data(static_cast<size_t>(s.bytes));
    read(s, data.data());
    covered += s.bytes;
  }
  ZS_REQUIRE(covered == expected_.bytes, CheckpointError, "'", path_, "' has ", expected_.bytes - covered,
             " bytes that belong to no section");
}

// ---- small files ----

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "cannot open directory '", dir, "' to sync it: ", detail::errno_string(e));
  }
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  ZS_REQUIRE(rc == 0, CheckpointError, "fsync of directory '", dir, "' failed: ", detail::errno_string(e));
}

void write_file_atomic(IoEngine& io, const std::string& dir, const std::string& name, const std::string& contents) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string dst = dir + "/" + name;
  try {
    AioFile f(tmp, AioFile::kReadWrite | AioFile::kCreate | AioFile::kTruncate, /*direct=*/false);
    io.wait(io.submit_write(f, contents.data(), static_cast<int64_t>(contents.size()), 0));
    f.sync();
  } catch (const IoError& e) {
    ::unlink(tmp.c_str());
    ZS_THROW(CheckpointError, "writing '", tmp, "' failed: ", e.message());
  }
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    ZS_THROW(CheckpointError, "cannot rename '", tmp, "' to '", dst, "': ", detail::errno_string(e));
  }
  fsync_dir(dir);
}

}  // namespace zeroshard
