// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"

namespace zeroshard::ckpt {
namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".zsr"; }
std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

RankFileRecord to_record(const RankFile& rf) {
  RankFileRecord r;
  r.rank = rf.rank();
  r.shard_rank = rf.shard_rank();
  r.file = rf.file();
  r.bytes = rf.bytes();
  r.crc32c = rf.crc32c();
  r.index_offset = rf.index_offset();
  r.index_bytes = rf.index_bytes();
  r.index_crc32c = rf.index_crc32c();
  return r;
}

void set_record(RankFile* rf, const RankFileRecord& r) {
  rf->set_rank(r.rank);
  rf->set_shard_rank(r.shard_rank);
  rf->set_file(r.file);
  rf->set_bytes(r.bytes);
  rf->set_crc32c(r.crc32c);
  rf->set_index_offset(r.index_offset);
  rf->set_index_bytes(r.index_bytes);
  rf->set_index_crc32c(r.index_crc32c);
}

std::unique_ptr<RankFileReader> open_rank_file(const std::string& dir, const RankFile& rf,
                                               std::shared_ptr<IoEngine> io) {
  return std::make_unique<RankFileReader>(dir + "/" + rf.file(), to_record(rf), std::move(io));
}

// ---- manifest and directories ----

// ---- manifest checksum and field checks ----

namespace {

// Field 20 (manifest_crc32c), wire type 5 (fixed32): the tag 20 << 3 | 5 = 165 as a varint.
constexpr unsigned char kCrcTag[2] = {0xa5, 0x01};
constexpr size_t kCrcTrailer = sizeof(kCrcTag) + 4;

uint32_t le32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

// The manifest's checksum, when it has one: the file must end with it, over all bytes before it.
void check_manifest_crc(const Manifest& m, const std::string& bytes, const std::string& path) {
  if (!m.has_manifest_crc32c()) return;  // written before manifests had one
  const size_t n = bytes.size();
  ZS_REQUIRE(n >= kCrcTrailer && std::memcmp(bytes.data() + n - kCrcTrailer, kCrcTag, sizeof(kCrcTag)) == 0 &&
                 le32(bytes.data() + n - 4) == m.manifest_crc32c(),
             CheckpointError, "'", path, "' is damaged: its CRC-32C field is not at its end");
  const uint32_t crc = crc32c(bytes.data(), n - kCrcTrailer);
  ZS_REQUIRE(crc == m.manifest_crc32c(), CheckpointError, "checksum mismatch in '", path, "': CRC-32C ", crc,
             ", the manifest says ", m.manifest_crc32c(), "; the file was changed or damaged");
}

// a * b into `out`; false on overflow or a negative factor.
bool product(int64_t a, int64_t b, int64_t& out) { return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &out); }

std::string flat_where(const FlatEntry& fe, int i) {
  return "flat parameter " + std::to_string(i) + " (unit '" + fe.unit() + "', '" + fe.name() + "')";
}

// The product of `dims` into `numel`; false when a dimension is negative or it overflows.
template <class Dims>
bool shape_numel(const Dims& dims, int64_t& numel) {
  numel = 1;
  for (int64_t d : dims) {
    if (!product(numel, d, numel)) return false;
  }
  return true;
}

void check_flat(const FlatEntry& fe, int i, int64_t group, const std::string& path) {
  const std::string where = "'" + path + "': " + flat_where(fe, i) + ": ";
  ZS_REQUIRE(fe.numel() >= 0 && fe.numel() <= fe.padded_numel(), CheckpointError, where, "numel ", fe.numel(),
             " is not within [0, padded_numel ", fe.padded_numel(), "]");
  int64_t whole = 0;
  ZS_REQUIRE(product(fe.shard_numel(), group, whole) && whole == fe.padded_numel(), CheckpointError, where,
             "shard_numel ", fe.shard_numel(), " x shard group size ", group, " is not padded_numel ", fe.padded_numel());
  for (int j = 0; j < fe.params_size(); ++j) {
    const ParamEntry& p = fe.params(j);
    const std::string pw = where + "parameter '" + p.name() + "': ";
    ZS_REQUIRE(p.offset() >= 0 && p.numel() >= 0 && p.numel() <= fe.numel() - p.offset(), CheckpointError, pw,
               "offset ", p.offset(), " + numel ", p.numel(), " is not within the flat parameter's numel ", fe.numel());
    int64_t n = 0;
    ZS_REQUIRE(shape_numel(p.shape(), n) && n == p.numel(), CheckpointError, pw, "its shape does not hold numel ",
               p.numel(), " elements");
  }
}

void check_rank_files(const Manifest& m, const std::string& path) {
  std::vector<bool> shard_seen(static_cast<size_t>(m.shard_group_size()), false);
  std::vector<bool> rank_seen(static_cast<size_t>(m.world_size()), false);
  for (const RankFile& rf : m.rank_files()) {
    const std::string where = "'" + path + "': rank file '" + rf.file() + "': ";
    ZS_REQUIRE(!rf.file().empty() && rf.file().find('/') == std::string::npos && rf.file() != "." && rf.file() != "..",
               CheckpointError, where, "the file name is not a name inside the checkpoint directory");
    ZS_REQUIRE(rf.rank() >= 0 && rf.rank() < m.world_size() && !rank_seen[static_cast<size_t>(rf.rank())],
               CheckpointError, where, "rank ", rf.rank(), " is outside [0, world size ", m.world_size(),
               ") or listed twice");
    rank_seen[static_cast<size_t>(rf.rank())] = true;
    ZS_REQUIRE(rf.bytes() >= 0 && rf.index_offset() >= 16 && rf.index_bytes() >= 0 &&
                   rf.index_offset() <= rf.bytes() && rf.index_bytes() <= rf.bytes() - rf.index_offset(),
               CheckpointError, where, "its index (", rf.index_bytes(), " bytes at offset ", rf.index_offset(),
               ") lies outside its ", rf.bytes(), " bytes");
    if (!rf.holds_shards()) continue;
    ZS_REQUIRE(rf.shard_rank() >= 0 && rf.shard_rank() < m.shard_group_size() &&
                   !shard_seen[static_cast<size_t>(rf.shard_rank())],
               CheckpointError, where, "shard_rank ", rf.shard_rank(), " is outside [0, shard group size ",
               m.shard_group_size(), ") or held by two files");
    shard_seen[static_cast<size_t>(rf.shard_rank())] = true;
  }
}

}  // namespace

std::string manifest_bytes(Manifest m) {
  m.clear_manifest_crc32c();
  std::string bytes = m.SerializeAsString();
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(kCrcTag), sizeof(kCrcTag));
  for (int i = 0; i < 4; ++i) bytes += static_cast<char>((crc >> (8 * i)) & 0xff);
  return bytes;
}

void check_manifest(const Manifest& m, const std::string& path) {
  // Bounded so that the per-rank tables below stay small whatever the file says.
  constexpr int kMaxRanks = 1 << 20;
  ZS_REQUIRE(m.world_size() >= 1 && m.world_size() <= kMaxRanks, CheckpointError, "'", path, "': world_size ",
             m.world_size(), " is not within [1, ", kMaxRanks, "]");
  ZS_REQUIRE(m.shard_group_size() >= 1 && m.shard_group_size() <= m.world_size(), CheckpointError, "'", path,
             "': shard_group_size ", m.shard_group_size(), " is not within [1, world size ", m.world_size(), "]");
  for (int i = 0; i < m.flats_size(); ++i) check_flat(m.flats(i), i, m.shard_group_size(), path);
  for (const BufferEntry& b : m.buffers()) {
    int64_t n = 0;
    ZS_REQUIRE(shape_numel(b.shape(), n) && n <= (int64_t{1} << 56), CheckpointError, "'", path, "': buffer '", b.name(),
               "': its shape has a negative dimension or too many elements");
  }
  check_rank_files(m, path);
}

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
  const std::string bytes = ss.str();
  ZS_REQUIRE(m.ParseFromString(bytes), CheckpointError, "'", path, "' does not parse as a zeroshard manifest");
  // The version first: a newer format may checksum differently, and "upgrade" is the useful answer.
  ZS_REQUIRE(m.format_version() >= 1 && m.format_version() <= kFormatVersion, CheckpointError, "'", path,
             "' has checkpoint format version ", m.format_version(), "; this zeroshard reads versions 1..",
             kFormatVersion, m.format_version() > kFormatVersion ? " (written by a newer zeroshard: upgrade)" : "");
  check_manifest_crc(m, bytes, path);
  check_manifest(m, path);
  return m;
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

std::vector<SavedCheckpoint> list_checkpoints_by_save(const std::string& dir) {
  std::vector<SavedCheckpoint> out;
  for (const auto& [step, path] : list_checkpoints(dir)) {
    SavedCheckpoint c;
    c.step = step;
    c.path = path;
    std::ifstream in(path + "/" + kManifestName, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Manifest m;
    if (m.ParseFromString(ss.str())) c.sequence = m.save_sequence();  // unreadable: as old as can be
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const SavedCheckpoint& a, const SavedCheckpoint& b) {
    return a.sequence != b.sequence ? a.sequence < b.sequence : a.step < b.step;
  });
  return out;
}

std::string resolve_checkpoint(const std::string& path) {
  ZS_REQUIRE(is_dir(path), CheckpointError, "checkpoint path '", path, "' ",
             exists(path) ? "is not a directory" : "does not exist");
  if (exists(path + "/" + kManifestName)) return path;
  std::ifstream latest(path + "/" + kLatestName);
  std::string name;
  if (latest >> name && exists(path + "/" + name + "/" + kManifestName)) return path + "/" + name;
  const auto all = list_checkpoints_by_save(path);
  ZS_REQUIRE(!all.empty(), CheckpointError, "'", path,
             "' is not a checkpoint: it has no manifest.pb and no complete step-* checkpoint inside");
  return all.back().path;
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
  if (m.has_hf_config()) os << "model config    config.json, " << m.hf_config().size() << " bytes\n";
  if (m.has_lora()) {
    os << "LoRA            rank " << m.lora().rank() << ", alpha " << m.lora().alpha() << ", dropout " << m.lora().dropout()
       << ", targets";
    for (const auto& t : m.lora().targets()) os << " " << t;
    os << "\n";
  }
  for (const auto& u : m.user()) os << "user            " << u.key() << " (" << u.value().size() << " bytes)\n";
  return os.str();
}

std::string describe_checkpoint(const std::string& path) { return describe_manifest(read_manifest(resolve_checkpoint(path))); }

SavedRun saved_run(const std::string& path) {
  const Manifest m = read_manifest(resolve_checkpoint(path));
  return {m.step(), m.config_text()};
}

}  // namespace zeroshard::ckpt
