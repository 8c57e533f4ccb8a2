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
