#include "zeroshard/core/checkpoint_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zeroshard/core/crc32c.h"
#include "zeroshard/core/error.h"

namespace zeroshard::ckpt {
namespace {

std::string err(int e) { return detail::errno_string(e); }

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

void pread_all(int fd, void* dst, int64_t bytes, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ZS_THROW(CheckpointError, "cannot read '", path, "' at offset ", offset, ": ", err(e));
    }
    ZS_REQUIRE(n > 0, CheckpointError, "checkpoint file '", path, "' is truncated: it ends before offset ",
               offset, " (", bytes, " more bytes expected)");
    p += n;
    offset += n;
    bytes -= n;
  }
}

}  // namespace

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".zsr"; }
std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

// ---- writer ----

RankFileWriter::RankFileWriter(std::string path, int rank, int shard_rank) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "cannot create checkpoint file '", path_, "': ", err(e));
  }
  index_.set_rank(rank);
  index_.set_shard_rank(shard_rank);
  write(kRankFileMagic, 16);
}

RankFileWriter::~RankFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

// Large write() calls straight from the caller's memory (no stdio copy).
void RankFileWriter::write(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, static_cast<size_t>(std::min<int64_t>(bytes, int64_t{1} << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ZS_THROW(CheckpointError, "writing checkpoint file '", path_, "' failed at offset ", offset_, ": ", err(e),
               e == ENOSPC ? " (disk full)" : e == EFBIG ? " (file size limit)" : "");
    }
    p += n;
    bytes -= n;
    offset_ += n;
  }
}

void RankFileWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                         const void* data, int64_t bytes) {
  Section* s = index_.add_sections();
  s->set_name(name);
  s->set_dtype(dtype);
  for (int64_t d : shape) s->add_shape(d);
  s->set_offset(offset_);
  s->set_bytes(bytes);
  s->set_crc32c(crc32c(data, static_cast<size_t>(bytes)));
  write(data, bytes);
}

RankFile RankFileWriter::finish(const std::string& file_name) {
  RankFile rf;
  rf.set_rank(index_.rank());
  rf.set_shard_rank(index_.shard_rank());
  rf.set_file(file_name);
  const std::string idx = index_.SerializeAsString();
  rf.set_index_offset(offset_);
  rf.set_index_bytes(static_cast<int64_t>(idx.size()));
  rf.set_index_crc32c(crc32c(idx.data(), idx.size()));
  // The file's checksum covers the magic and the index, which holds every section's CRC: one
  // pass over the data computes both, and verify checks every byte through the sections.
  rf.set_crc32c(crc32c(idx.data(), idx.size(), crc32c(kRankFileMagic, 16)));
  write(idx.data(), static_cast<int64_t>(idx.size()));
  if (::fsync(fd_) != 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "fsync of checkpoint file '", path_, "' failed: ", err(e), e == ENOSPC ? " (disk full)" : "");
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "closing checkpoint file '", path_, "' failed: ", err(e));
  }
  rf.set_bytes(offset_);
  return rf;
}

// ---- reader ----

RankFileReader::RankFileReader(std::string path, const RankFile& expected) : path_(std::move(path)), expected_(expected) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "checkpoint rank file '", path_, "' (shard rank ", expected.shard_rank(),
             ") cannot be opened: ", err(e));
  }
  struct stat st{};
  ::fstat(fd_, &st);
  ZS_REQUIRE(st.st_size == expected.bytes(), CheckpointError, "checkpoint rank file '", path_, "' has ", st.st_size,
             " bytes, the manifest recorded ", expected.bytes(), st.st_size < expected.bytes() ? " (truncated)" : "");
  char magic[16];
  pread_all(fd_, magic, 16, 0, path_);
  ZS_REQUIRE(std::memcmp(magic, kRankFileMagic, 16) == 0, CheckpointError, "'", path_,
             "' is not a zeroshard rank file (bad magic)");
  std::string idx(static_cast<size_t>(expected.index_bytes()), '\0');
  pread_all(fd_, idx.data(), expected.index_bytes(), expected.index_offset(), path_);
  const uint32_t crc = crc32c(idx.data(), idx.size());
  ZS_REQUIRE(crc == expected.index_crc32c(), CheckpointError, "checksum mismatch in the index of '", path_,
             "' at offset ", expected.index_offset(), " (CRC-32C ", crc, ", manifest says ", expected.index_crc32c(),
             "): the file was changed or damaged");
  ZS_REQUIRE(index_.ParseFromString(idx), CheckpointError, "the index of '", path_, "' does not parse");
}

RankFileReader::~RankFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool RankFileReader::has(const std::string& name) const {
  for (const Section& s : index_.sections()) {
    if (s.name() == name) return true;
  }
  return false;
}

const Section& RankFileReader::section(const std::string& name) const {
  for (const Section& s : index_.sections()) {
    if (s.name() == name) return s;
  }
  ZS_THROW(CheckpointError, "checkpoint file '", path_, "' has no section '", name, "'");
}

void RankFileReader::read(const Section& s, void* dst) const {
  pread_all(fd_, dst, s.bytes(), s.offset(), path_);
  const uint32_t crc = crc32c(dst, static_cast<size_t>(s.bytes()));
  ZS_REQUIRE(crc == s.crc32c(), CheckpointError, "checksum mismatch in '", path_, "', section '", s.name(),
             "' at offset ", s.offset(), " (", s.bytes(), " bytes): CRC-32C ", crc, ", expected ", s.crc32c(),
             "; the file is damaged");
}

std::string RankFileReader::read_bytes(const std::string& name) const {
  const Section& s = section(name);
  std::string out(static_cast<size_t>(s.bytes()), '\0');
  read(s, out.data());
  return out;
}

void RankFileReader::verify_file() const {
  // Magic and index were checked at open (the index against the manifest's CRC); the file CRC is
  // the magic's and the index's, checked here, then every section's bytes.
  std::string raw(static_cast<size_t>(expected_.index_bytes()), '\0');
  pread_all(fd_, raw.data(), expected_.index_bytes(), expected_.index_offset(), path_);
  const uint32_t file_crc = crc32c(raw.data(), raw.size(), crc32c(kRankFileMagic, 16));
  ZS_REQUIRE(file_crc == expected_.crc32c(), CheckpointError, "checksum mismatch in '", path_, "': CRC-32C ", file_crc,
             ", the manifest recorded ", expected_.crc32c(), "; the file is damaged");
  int64_t covered = 16 + expected_.index_bytes();
  for (const Section& s : index_.sections()) {
    std::vector<char> data(static_cast<size_t>(s.bytes()));
    read(s, data.data());
    covered += s.bytes();
  }
  ZS_REQUIRE(covered == expected_.bytes(), CheckpointError, "'", path_, "' has ", expected_.bytes() - covered,
             " bytes that belong to no section");
}

// ---- manifest and directories ----

Manifest read_manifest(const std::string& step_dir) {
  ZS_REQUIRE(is_dir(step_dir), CheckpointError, "'", step_dir, "' is not a checkpoint: ",
             exists(step_dir) ? "not a directory" : "it does not exist");
  const std::string path = step_dir + "/" + kManifestName;
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), CheckpointError, "'", step_dir, "' is not a zeroshard checkpoint: it has no ", kManifestName,
             " (an interrupted save leaves only .tmp-* directories; point at a step-* directory or the checkpoint root)");
  std::stringstream ss;
  ss << in.rdbuf();
  Manifest m;
  ZS_REQUIRE(m.ParseFromString(ss.str()), CheckpointError, "'", path, "' does not parse as a zeroshard manifest");
  ZS_REQUIRE(m.format_version() >= 1 && m.format_version() <= kFormatVersion, CheckpointError, "'", path,
             "' has checkpoint format version ", m.format_version(), "; this zeroshard reads versions 1..",
             kFormatVersion, m.format_version() > kFormatVersion ? " (written by a newer zeroshard: upgrade)" : "");
  return m;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "cannot open directory '", dir, "' to sync it: ", err(e));
  }
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  ZS_REQUIRE(rc == 0, CheckpointError, "fsync of directory '", dir, "' failed: ", err(e));
}

void write_file_atomic(const std::string& dir, const std::string& name, const std::string& contents) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string dst = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    ZS_THROW(CheckpointError, "cannot create '", tmp, "': ", err(e));
  }
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      ZS_THROW(CheckpointError, "writing '", tmp, "' failed: ", err(e), e == ENOSPC ? " (disk full)" : "");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    ZS_THROW(CheckpointError, "fsync of '", tmp, "' failed: ", err(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    ZS_THROW(CheckpointError, "cannot rename '", tmp, "' to '", dst, "': ", err(e));
  }
  fsync_dir(dir);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("step-", 0) != 0) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (end == nullptr || *end != '\0') continue;
    if (exists(dir + "/" + name + "/" + kManifestName)) out.emplace_back(step, dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string resolve_checkpoint(const std::string& path) {
  ZS_REQUIRE(is_dir(path), CheckpointError, "checkpoint path '", path, "' ",
             exists(path) ? "is not a directory" : "does not exist");
  if (exists(path + "/" + kManifestName)) return path;
  std::ifstream latest(path + "/" + kLatestName);
  std::string name;
  if (latest >> name && exists(path + "/" + name + "/" + kManifestName)) return path + "/" + name;
  const auto all = list_checkpoints(path);
  ZS_REQUIRE(!all.empty(), CheckpointError, "'", path,
             "' is not a checkpoint: it has no manifest.pb and no complete step-* checkpoint inside");
  return all.back().second;
}

std::string describe_manifest(const Manifest& m) {
  std::ostringstream os;
  os << "format version  " << m.format_version() << " (zeroshard " << m.zeroshard_version() << ")\n"
     << "step            " << m.step() << "\n"
     << "world size      " << m.world_size() << ", strategy " << m.strategy() << ", shard group "
     << m.shard_group_size() << "\n"
     << "optimizer       " << m.optimizer() << ", " << m.optimizer_steps() << " steps, state:";
  for (const auto& n : m.optimizer_state_names()) os << " " << n;
  os << "\n";
  if (m.has_grad_scaler()) {
    os << "loss scaler     scale " << m.grad_scaler().scale() << ", steps " << m.grad_scaler().steps()
       << ", skipped " << m.grad_scaler().skipped() << "\n";
  }
  int64_t total = 0, trainable = 0;
  for (const auto& f : m.flats()) {
    total += f.numel();
    if (f.trainable()) trainable += f.numel();
  }
  os << "parameters      " << total << " (" << trainable << " trainable) in " << m.flats_size() << " flat parameters\n";
  for (const auto& f : m.flats()) {
    os << "  unit " << f.unit() << " [" << f.name() << "]" << (f.trainable() ? "" : " (frozen)") << ": " << f.numel() << " elements, padded "
       << f.padded_numel() << ", " << f.params_size() << " parameter(s), optimizer updates " << f.optimizer_updates()
       << "\n";
    for (const auto& p : f.params()) {
      os << "    " << p.name() << " [";
      for (int i = 0; i < p.shape_size(); ++i) os << (i ? ", " : "") << p.shape(i);
      os << "] at " << p.offset();
      for (const auto& a : p.aliases()) os << " (also " << a << ")";
      os << "\n";
    }
  }
  for (const auto& b : m.buffers()) {
    os << "  buffer " << b.name() << " " << b.dtype() << " [";
    for (int i = 0; i < b.shape_size(); ++i) os << (i ? ", " : "") << b.shape(i);
    os << "]\n";
  }
  os << "rank files      " << m.rank_files_size() << "\n";
  for (const auto& rf : m.rank_files()) {
    os << "  " << rf.file() << ": " << rf.bytes() << " bytes, CRC-32C " << rf.crc32c() << " (rank " << rf.rank()
       << ")\n";
  }
  for (const auto& u : m.user()) os << "user            " << u.key() << " (" << u.value().size() << " bytes)\n";
  return os.str();
}

}  // namespace zeroshard::ckpt
