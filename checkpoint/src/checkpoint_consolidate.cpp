// SPDX-License-Identifier: Apache-2.0
// Consolidation of a sharded checkpoint into one LibTorch archive or one safetensors file (unit by
// unit, streaming), and whole-checkpoint verification (zeroshard-ckpt consolidate/export/verify).

#include <ATen/ops/empty.h>
#include <torch/serialize/output-archive.h>

#include <unistd.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <sstream>


#include "zeroshard/checkpoint/checkpoint_manifest.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/io/replace_file.h"

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

// A checkpoint opened for reading whole units: its manifest and a reader per shard file.
struct OpenCheckpoint {
  std::string dir;
  Manifest m;
  std::map<int, std::unique_ptr<RankFileReader>> shards;  // shard rank -> its file
  const RankFile* rank0 = nullptr;

  explicit OpenCheckpoint(const std::string& path) : dir(resolve_checkpoint(path)), m(read_manifest(dir)) {
    std::map<int, const RankFile*> files;
    for (const auto& rf : m.rank_files()) {
      if (rf.holds_shards()) files[rf.shard_rank()] = &rf;
      if (rf.rank() == 0) rank0 = &rf;
    }
    ZS_REQUIRE(static_cast<int>(files.size()) == m.shard_group_size(), CheckpointError, "checkpoint '", dir,
               "' lists ", files.size(), " shard files, its shard group had ", m.shard_group_size(), " ranks");
    for (const auto& [sr, rf] : files) shards[sr] = open_rank_file(dir, *rf);
  }

  // Unit `fe`'s whole flat parameter (fp32, padded) from every shard: one unit in memory at a time.
  at::Tensor unit(const FlatEntry& fe) {
    at::Tensor flat = at::empty({fe.padded_numel()}, at::kFloat);
    for (auto& [sr, r] : shards) {
      const RankFileSection& sec = r->section(fe.name() + "/param");
      ZS_REQUIRE(sec.bytes == fe.shard_numel() * 4, CheckpointError, "'", r->path(), "' section '", sec.name,
                 "' has ", sec.bytes, " bytes, expected ", fe.shard_numel() * 4);
      r->read(sec, flat.data_ptr<float>() + static_cast<int64_t>(sr) * fe.shard_numel());
    }
    return flat;
  }

  // Every buffer, read from rank 0's file, with floating ones converted to `dtype`.
  void for_each_buffer(c10::ScalarType dtype, const std::function<void(const BufferEntry&, at::Tensor)>& fn) {
    if (m.buffers_size() == 0) return;
    ZS_REQUIRE(rank0 != nullptr, CheckpointError, "checkpoint '", dir, "' has no rank 0 file (buffers live there)");
    std::unique_ptr<RankFileReader> r = open_rank_file(dir, *rank0);
    for (const BufferEntry& b : m.buffers()) {
      std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
      at::Tensor t = at::empty(shape, parse_dtype(b.dtype(), "buffer '" + b.name() + "'"));
      const RankFileSection& sec = r->section("buffer/" + b.name());
      ZS_REQUIRE(sec.bytes == static_cast<int64_t>(t.nbytes()), CheckpointError, "buffer '", b.name(), "' in '",
                 r->path(), "' has ", sec.bytes, " bytes, expected ", t.nbytes());
      r->read(sec, t.data_ptr());
      fn(b, t.is_floating_point() ? t.to(dtype) : t);
    }
  }
};

void check_export_dtype(c10::ScalarType dtype, const char* what) {
  ZS_REQUIRE(dtype == at::kFloat || dtype == at::kBFloat16, UsageError, what,
             ": dtype must be float32 or bfloat16, got ", c10::toString(dtype));
}

}  // namespace

ConsolidateStats consolidate(const std::string& ckpt_path, const std::string& out_path, c10::ScalarType dtype) {
  check_export_dtype(dtype, "consolidate");
  OpenCheckpoint c(ckpt_path);
  ConsolidateStats stats;
  ArchiveTree tree;
  for (const FlatEntry& fe : c.m.flats()) {
    const at::Tensor flat = c.unit(fe);
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
  c.for_each_buffer(dtype, [&](const BufferEntry& b, at::Tensor t) {
    tree.write(b.name(), t, true);
    ++stats.buffers;
  });
  tree.finish();
  // Written under a temporary name beside it, synced, then renamed: a run that dies leaves the
  // earlier file (or none), never a truncated one under the final name.
  const std::string tmp = temp_name_for(out_path);
  try {
    tree.archive.save_to(tmp);
  } catch (const c10::Error& e) {
    ::unlink(tmp.c_str());
    ZS_THROW(CheckpointError, "cannot write the consolidated model to '", tmp, "' (for '", out_path,
             "'): ", e.what_without_backtrace());
  }
  try {
    replace_with_temp(tmp, out_path);
  } catch (const IoError& e) {
    ZS_THROW(CheckpointError, "cannot put the consolidated model in place: ", e.message());
  }
  return stats;
}

namespace {

bool is_lora_name(const std::string& name) { return lora::has_leaf(name, "lora_A") || lora::has_leaf(name, "lora_B"); }

std::vector<int64_t> shape_of(const ParamEntry& p) { return std::vector<int64_t>(p.shape().begin(), p.shape().end()); }

// The LoRA adapters by name: read first (small: they are what trained), to be folded into their
// layer's weight as that is written.
std::map<std::string, at::Tensor> read_adapters(OpenCheckpoint& c) {
  std::map<std::string, at::Tensor> adapters;
  for (const FlatEntry& fe : c.m.flats()) {
    at::Tensor flat;
    for (const ParamEntry& p : fe.params()) {
      if (!is_lora_name(p.name())) continue;
      if (!flat.defined()) flat = c.unit(fe);
      adapters[p.name()] = flat.narrow(0, p.offset(), p.numel()).view(shape_of(p)).clone();
    }
  }
  ZS_REQUIRE(!adapters.empty(), CheckpointError, "checkpoint '", c.dir, "' has no lora_A / lora_B tensors to merge");
  return adapters;
}

// What the file declares before any data (the header comes first): every tensor, adapters left out
// when they are merged; tied names are written once, under the first name, and listed in the
// metadata.
struct ExportHeader {
  std::vector<TensorInfo> infos;
  std::map<std::string, std::string> metadata;
};
ExportHeader export_header(const OpenCheckpoint& c, c10::ScalarType dtype, bool merge_lora, double scale) {
  ExportHeader h;
  std::string aliases;
  for (const FlatEntry& fe : c.m.flats()) {
    for (const ParamEntry& p : fe.params()) {
      if (merge_lora && is_lora_name(p.name())) continue;
      h.infos.push_back({p.name(), dtype, shape_of(p)});
      for (const auto& a : p.aliases()) aliases += (aliases.empty() ? "" : ";") + a + "=" + p.name();
    }
  }
  for (const BufferEntry& b : c.m.buffers()) {
    const c10::ScalarType t = parse_dtype(b.dtype(), "buffer '" + b.name() + "'");
    h.infos.push_back({b.name(), c10::isFloatingType(t) ? dtype : t, std::vector<int64_t>(b.shape().begin(), b.shape().end())});
  }
  h.metadata = {{"format", "pt"},
                {"zeroshard.step", std::to_string(c.m.step())},
                {"zeroshard.version", c.m.zeroshard_version()}};
  if (!aliases.empty()) h.metadata["zeroshard.aliases"] = aliases;
  if (merge_lora) h.metadata["zeroshard.lora_merged_scale"] = std::to_string(scale);
  return h;
}

// Weight `name` with its layer's adapters folded in where it has them (counted in `merged`).
at::Tensor with_adapters(const OpenCheckpoint& c, const std::map<std::string, at::Tensor>& adapters,
                         const std::string& name, at::Tensor weight, double scale, size_t* merged) {
  if (!lora::has_leaf(name, "weight")) return weight;
  const std::string prefix = name.substr(0, name.size() - std::string("weight").size());
  auto a = adapters.find(prefix + "lora_A");
  auto b = adapters.find(prefix + "lora_B");
  ZS_REQUIRE((a == adapters.end()) == (b == adapters.end()), CheckpointError, "checkpoint '", c.dir, "': '", name,
             "' has only one of ", prefix, "lora_A and ", prefix, "lora_B");
  if (a == adapters.end()) return weight;
  std::map<std::string, at::Tensor> layer = {{"weight", weight}, {"lora_A", a->second}, {"lora_B", b->second}};
  ++*merged;
  return lora::merged(layer, scale).at("weight");
}

}  // namespace

ConsolidateStats export_safetensors(const std::string& ckpt_path, const std::string& out_path, c10::ScalarType dtype,
                                    double merge_lora_scale) {
  check_export_dtype(dtype, "export to safetensors");
  OpenCheckpoint c(ckpt_path);
  ZS_REQUIRE(std::isfinite(merge_lora_scale) && merge_lora_scale >= 0, UsageError,
             "export_safetensors: merge_lora_scale = ", merge_lora_scale, " must be finite and >= 0 (0: no merge)");
  const bool merge_lora = merge_lora_scale > 0;
  const std::map<std::string, at::Tensor> adapters = merge_lora ? read_adapters(c) : std::map<std::string, at::Tensor>{};
  const ExportHeader header = export_header(c, dtype, merge_lora, merge_lora_scale);
  SafetensorsWriter w(out_path, header.infos, header.metadata);
  ConsolidateStats stats;
  size_t merged_layers = 0;
  for (const FlatEntry& fe : c.m.flats()) {
    const at::Tensor flat = c.unit(fe);
    stats.peak_flat_bytes = std::max<int64_t>(stats.peak_flat_bytes, fe.padded_numel() * 4);
    for (const ParamEntry& p : fe.params()) {
      if (merge_lora && is_lora_name(p.name())) continue;
      at::Tensor t = flat.narrow(0, p.offset(), p.numel()).view(shape_of(p));
      if (merge_lora) t = with_adapters(c, adapters, p.name(), t, merge_lora_scale, &merged_layers);
      w.write(p.name(), t.to(dtype));
      stats.parameters += 1 + p.aliases_size();
      stats.elements += p.numel();
    }
  }
  ZS_REQUIRE(!merge_lora || merged_layers * 2 == adapters.size(), CheckpointError, "checkpoint '", c.dir, "': ",
             adapters.size(), " adapter tensors but ", merged_layers, " layers with a weight to merge them into");
  c.for_each_buffer(dtype, [&](const BufferEntry& b, at::Tensor t) {
    w.write(b.name(), t);
    ++stats.buffers;
  });
  w.finish();
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
