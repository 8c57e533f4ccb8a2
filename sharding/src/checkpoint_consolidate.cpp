// Consolidation of a sharded checkpoint into one LibTorch archive, and whole-checkpoint
// verification (zeroshard-ckpt consolidate / export / verify).

#include <ATen/ops/empty.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <memory>
#include <sstream>

#include "zeroshard/sharding/checkpoint_manifest.h"
#include "zeroshard/base/error.h"

namespace zeroshard::ckpt {
namespace {

// Nested archives mirroring the module tree: "a.b.w" goes to archive a -> b as key "w".
struct ArchiveTree {
  torch::serialize::OutputArchive archive;
  std::map<std::string, std::unique_ptr<ArchiveTree>> children;

  void write(const std::string& dotted, const at::Tensor& t, bool is_buffer) {
    const size_t dot = dotted.find('.');
    if (dot == std::string::npos) {
      archive.write(dotted, t, is_buffer);
      return;
    }
    auto& child = children[dotted.substr(0, dot)];
    if (!child) child = std::make_unique<ArchiveTree>();
    child->write(dotted.substr(dot + 1), t, is_buffer);
  }
  // Children are written into their parents last (OutputArchive copies what it is given).
  void finish() {
    for (auto& [name, child] : children) {
      child->finish();
      archive.write(name, child->archive);
    }
  }
};

c10::ScalarType parse_dtype(const std::string& d, const std::string& what) {
  if (d == "Float" || d == "float32") return at::kFloat;
  if (d == "BFloat16" || d == "bfloat16") return at::kBFloat16;
  if (d == "Half") return at::kHalf;
  if (d == "Double") return at::kDouble;
  if (d == "Long") return at::kLong;
  if (d == "Int") return at::kInt;
  if (d == "Bool") return at::kBool;
  if (d == "Byte" || d == "uint8") return at::kByte;
  ZS_THROW(CheckpointError, what, " has dtype '", d, "', which consolidation does not handle");
}

}  // namespace

ConsolidateStats consolidate(const std::string& ckpt_path, const std::string& out_path, c10::ScalarType dtype) {
  ZS_REQUIRE(dtype == at::kFloat || dtype == at::kBFloat16, UsageError,
             "consolidate: dtype must be float32 or bfloat16, got ", c10::toString(dtype));
  const std::string dir = resolve_checkpoint(ckpt_path);
  const Manifest m = read_manifest(dir);
  std::map<int, const RankFile*> shard_files;
  const RankFile* rank0 = nullptr;
  for (const auto& rf : m.rank_files()) {
    if (rf.holds_shards()) shard_files[rf.shard_rank()] = &rf;
    if (rf.rank() == 0) rank0 = &rf;
  }
  ZS_REQUIRE(static_cast<int>(shard_files.size()) == m.shard_group_size(), CheckpointError, "checkpoint '", dir,
             "' lists ", shard_files.size(), " shard files, its shard group had ", m.shard_group_size(), " ranks");
  std::map<int, std::unique_ptr<RankFileReader>> readers;
  for (const auto& [sr, rf] : shard_files) readers[sr] = open_rank_file(dir, *rf);
  ConsolidateStats stats;
  ArchiveTree tree;
  for (int i = 0; i < m.flats_size(); ++i) {
    const FlatEntry& fe = m.flats(i);
    // One unit at a time: its full flat buffer from every shard.
    at::Tensor flat = at::empty({fe.padded_numel()}, at::kFloat);
    for (auto& [sr, r] : readers) {
      const RankFileSection& sec = r->section(fe.name() + "/param");
      ZS_REQUIRE(sec.bytes == fe.shard_numel() * 4, CheckpointError, "'", r->path(), "' section '", sec.name,
                 "' has ", sec.bytes, " bytes, expected ", fe.shard_numel() * 4);
      r->read(sec, flat.data_ptr<float>() + static_cast<int64_t>(sr) * fe.shard_numel());
    }
    stats.peak_flat_bytes = std::max<int64_t>(stats.peak_flat_bytes, fe.padded_numel() * 4);
    for (const ParamEntry& p : fe.params()) {
      std::vector<int64_t> shape(p.shape().begin(), p.shape().end());
      at::Tensor t = flat.narrow(0, p.offset(), p.numel()).view(shape).to(dtype).clone();
      tree.write(p.name(), t, false);
      ++stats.parameters;
      for (const auto& alias : p.aliases()) {
        tree.write(alias, t, false);
        ++stats.parameters;
      }
      stats.elements += p.numel();
    }
  }
  if (m.buffers_size() > 0) {
    ZS_REQUIRE(rank0 != nullptr, CheckpointError, "checkpoint '", dir, "' has no rank 0 file (buffers live there)");
    RankFileReader r(dir + "/" + rank0->file(), to_record(*rank0));
    for (const BufferEntry& b : m.buffers()) {
      std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
      at::Tensor t = at::empty(shape, parse_dtype(b.dtype(), "buffer '" + b.name() + "'"));
      const RankFileSection& sec = r.section("buffer/" + b.name());
      ZS_REQUIRE(sec.bytes == static_cast<int64_t>(t.nbytes()), CheckpointError, "buffer '", b.name(), "' in '",
                 r.path(), "' has ", sec.bytes, " bytes, expected ", t.nbytes());
      r.read(sec, t.data_ptr());
      if (t.is_floating_point()) t = t.to(dtype);
      tree.write(b.name(), t, true);
      ++stats.buffers;
    }
  }
  tree.finish();
  try {
    tree.archive.save_to(out_path);
  } catch (const c10::Error& e) {
    ZS_THROW(CheckpointError, "cannot write the consolidated model to '", out_path, "': ", e.what_without_backtrace());
  }
  return stats;
}

std::string verify_checkpoint(const std::string& ckpt_path) {
  const std::string dir = resolve_checkpoint(ckpt_path);
  const Manifest m = read_manifest(dir);
  std::ostringstream os;
  for (const auto& rf : m.rank_files()) {
    RankFileReader r(dir + "/" + rf.file(), to_record(rf));
    r.verify_file();
    os << "ok  " << rf.file() << " (" << rf.bytes() << " bytes, " << r.sections().size() << " sections)\n";
  }
  return os.str();
}

}  // namespace zeroshard::ckpt
