// SPDX-License-Identifier: Apache-2.0
// CheckpointTensors (checkpoint_tensors.h): a checkpoint's parameters read tensor by tensor, each
// flat parameter's shard sections streamed front to back with their checksums checked.

#include "zeroshard/checkpoint/checkpoint_tensors.h"

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <limits>

#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard::ckpt {
namespace {

constexpr int64_t kPiece = 1 << 20;  // bytes read at a time when reading past data nobody asked for

c10::ScalarType buffer_dtype(const std::string& d, const std::string& name) {
  static const std::map<std::string, c10::ScalarType> kTypes = {
      {"Float", at::kFloat}, {"BFloat16", at::kBFloat16}, {"Half", at::kHalf}, {"Double", at::kDouble},
      {"Long", at::kLong},   {"Int", at::kInt},           {"Bool", at::kBool}, {"Byte", at::kByte}};
  auto it = kTypes.find(d);
  ZS_REQUIRE(it != kTypes.end(), CheckpointError, "buffer '", name, "' has dtype '", d, "', which is not read back");
  return it->second;
}

}  // namespace

// The rank files and, per flat parameter, how far its sections have been read and checked.
struct CheckpointTensors::Impl {
  Manifest m;
  std::map<int, const RankFile*> shard_files;  // shard rank -> its file's record
  const RankFile* rank0 = nullptr;
  std::map<int, std::unique_ptr<RankFileReader>> readers;
  struct Cursor {
    int64_t pos = 0;   // bytes of the padded flat read so far (from the start of a section)
    uint32_t crc = 0;  // of the current section's bytes before pos
  };
  std::vector<Cursor> cursors;
  std::string cached_name;  // the last merged weight, whose ranges load_pretrained reads one by one
  at::Tensor cached;
  int64_t* bytes_read = nullptr;

  RankFileReader& reader(const std::string& dir, int shard_rank) {
    auto it = readers.find(shard_rank);
    if (it != readers.end()) return *it->second;
    return *readers.emplace(shard_rank, open_rank_file(dir, *shard_files.at(shard_rank))).first->second;
  }

  // Reads the next `bytes` bytes of flat `flat` into `dst` (or a scratch piece when null),
  // checking each section's CRC-32C as its last byte goes by.
  void consume(const std::string& dir, size_t flat, int64_t bytes, char* dst) {
    const FlatEntry& fe = m.flats(static_cast<int>(flat));
    const int64_t sec_bytes = fe.shard_numel() * 4;
    Cursor& c = cursors[flat];
    at::Tensor scratch;
    while (bytes > 0) {
      const int shard = static_cast<int>(c.pos / sec_bytes);
      const int64_t off = c.pos % sec_bytes;
      const int64_t take = std::min(bytes, std::min(sec_bytes - off, dst != nullptr ? bytes : kPiece));
      if (dst == nullptr && !scratch.defined()) scratch = at::empty({std::min(kPiece, bytes)}, at::kByte);
      char* buf = dst != nullptr ? dst : static_cast<char*>(scratch.data_ptr());
      RankFileReader& r = reader(dir, shard);
      const RankFileSection& sec = r.section(fe.name() + "/param");
      ZS_REQUIRE(sec.bytes == sec_bytes, CheckpointError, "'", r.path(), "' section '", sec.name, "' has ", sec.bytes,
                 " bytes, expected ", sec_bytes);
      r.read_part(sec, off, take, buf);
      c.crc = crc32c(buf, static_cast<size_t>(take), c.crc);
      *bytes_read += take;
      c.pos += take;
      bytes -= take;
      if (dst != nullptr) dst += take;
      if (off + take == sec_bytes) {
        ZS_REQUIRE(c.crc == sec.crc32c, CheckpointError, "checksum mismatch in '", r.path(), "', section '", sec.name,
                   "' at offset ", sec.offset, " (", sec.bytes, " bytes): CRC-32C ", c.crc, ", expected ", sec.crc32c,
                   "; the file is damaged");
        c.crc = 0;
      }
    }
  }

  // Parameter `p` whole, as saved (fp32).
  at::Tensor raw(const std::string& dir, const SavedParam& p) {
    at::Tensor t = at::empty({p.numel}, at::kFloat);
    read_elements(dir, p.flat, p.offset, p.numel, t.data_ptr<float>());
    return t.view(p.shape);
  }

  // Elements [begin, begin + count) of flat `flat` (padded layout) into `dst`.
  void read_elements(const std::string& dir, size_t flat, int64_t begin, int64_t count, float* dst) {
    const int64_t sec_bytes = m.flats(static_cast<int>(flat)).shard_numel() * 4;
    Cursor& c = cursors[flat];
    if (begin * 4 < c.pos) c = Cursor{(begin * 4 / sec_bytes) * sec_bytes, 0};  // back: from the section's start
    consume(dir, flat, begin * 4 - c.pos, nullptr);
    consume(dir, flat, count * 4, reinterpret_cast<char*>(dst));
  }
};

CheckpointTensors::CheckpointTensors(const std::string& path, Options options)
    : impl_(std::make_unique<Impl>()), dir_(resolve_checkpoint(path)), merge_(options.merge_lora) {
  Impl& im = *impl_;
  im.m = read_manifest(dir_);
  im.bytes_read = &bytes_read_;
  for (const RankFile& rf : im.m.rank_files()) {
    if (rf.holds_shards()) im.shard_files[rf.shard_rank()] = &rf;
    if (rf.rank() == 0) im.rank0 = &rf;
  }
  ZS_REQUIRE(static_cast<int>(im.shard_files.size()) == im.m.shard_group_size(), CheckpointError, "checkpoint '", dir_,
             "' lists ", im.shard_files.size(), " shard files, its shard group had ", im.m.shard_group_size(), " ranks");
  const ModelDescription d = model_description(im.m);
  hf_config_ = d.hf_config;
  lora_ = d.lora;
  step_ = im.m.step();
  im.cursors.resize(static_cast<size_t>(im.m.flats_size()));
  for (int i = 0; i < im.m.flats_size(); ++i) {
    const FlatEntry& fe = im.m.flats(i);
    // Every shard file holds this flat's section at the size the manifest gives, checked against
    // the files' indexes now: a reader allocates by the manifest's sizes, so a manifest that
    // promises more than the files hold must fail before any allocation.
    for (const auto& [shard, rf] : im.shard_files) {
      RankFileReader& r = im.reader(dir_, shard);
      const RankFileSection& sec = r.section(fe.name() + "/param");
      ZS_REQUIRE(sec.bytes == fe.shard_numel() * 4, CheckpointError, "'", r.path(), "' section '", sec.name, "' has ",
                 sec.bytes, " bytes, the manifest's flat parameter '", fe.name(), "' of unit '", fe.unit(), "' has ",
                 fe.shard_numel(), " fp32 elements per shard (", fe.shard_numel() * 4, " bytes)");
    }
    for (const ParamEntry& p : fe.params()) {
      SavedParam s{p.name(), {p.aliases().begin(), p.aliases().end()}, {p.shape().begin(), p.shape().end()},
                   p.numel(), fe.unit(), fe.trainable(), static_cast<size_t>(i), p.offset()};
      by_name_[s.name] = params_.size();
      for (const std::string& a : s.aliases) by_name_[a] = params_.size();
      if (lora::has_leaf(s.name, "lora_A")) adapted_.push_back(s.name.substr(0, s.name.size() - 7));
      params_.push_back(std::move(s));
    }
  }
  for (const SavedParam& p : params_) {
    const bool adapter = lora::has_leaf(p.name, "lora_A") || lora::has_leaf(p.name, "lora_B");
    if (!(merge_ && adapter)) infos_.push_back({p.name, at::kFloat, p.shape});
  }
  for (const BufferEntry& b : im.m.buffers()) {
    infos_.push_back({b.name(), buffer_dtype(b.dtype(), b.name()), {b.shape().begin(), b.shape().end()}});
  }
  if (merge_ && !adapted_.empty()) lora_scale();  // a checkpoint that cannot be merged says so now
}

CheckpointTensors::~CheckpointTensors() = default;

std::map<std::string, std::string> CheckpointTensors::aliases() const {
  std::map<std::string, std::string> out;
  for (const SavedParam& p : params_) {
    for (const std::string& a : p.aliases) out[a] = p.name;
  }
  return out;
}

const SavedParam& CheckpointTensors::param(const std::string& name) const {
  auto it = by_name_.find(name);
  ZS_REQUIRE(it != by_name_.end(), UsageError, "checkpoint '", dir_, "' has no parameter '", name, "'");
  return params_[it->second];
}

double CheckpointTensors::lora_scale() const {
  ZS_REQUIRE(!adapted_.empty(), CheckpointError, "checkpoint '", dir_, "' has no LoRA adapters");
  ZS_REQUIRE(lora_.has_value(), CheckpointError, "checkpoint '", dir_, "' has LoRA adapters on ", adapted_.size(),
             " layers but does not record their alpha and rank (it was saved without CheckpointOptions::model.lora), "
             "so they cannot be merged or exported");
  const int64_t rows = param(adapted_.front() + ".lora_A").shape.at(0);
  ZS_REQUIRE(lora_->rank == rows, CheckpointError, "checkpoint '", dir_, "' records LoRA rank ", lora_->rank, " but '",
             adapted_.front(), ".lora_A' has ", rows, " rows");
  return lora_->alpha / static_cast<double>(lora_->rank);
}

at::Tensor CheckpointTensors::read_whole(const std::string& name) {
  Impl& im = *impl_;
  for (const BufferEntry& b : im.m.buffers()) {
    if (b.name() != name) continue;
    ZS_REQUIRE(im.rank0 != nullptr, CheckpointError, "checkpoint '", dir_, "' has no rank 0 file (buffers live there)");
    std::unique_ptr<RankFileReader> r = open_rank_file(dir_, *im.rank0);
    const c10::ScalarType dtype = buffer_dtype(b.dtype(), name);
    const RankFileSection& sec = r->section("buffer/" + name);
    // The size the manifest's shape gives, checked against the file's before allocating (the
    // manifest's check bounds the element count, not its bytes).
    const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
    int64_t numel = 1;
    for (int64_t d : b.shape()) numel *= d;
    ZS_REQUIRE(numel <= std::numeric_limits<int64_t>::max() / elem, CheckpointError, "buffer '", name,
               "' of checkpoint '", dir_, "' has ", numel, " elements of ", b.dtype(), ": more bytes than a file holds");
    ZS_REQUIRE(sec.bytes == numel * elem, CheckpointError, "buffer '", name, "' in '", r->path(), "' has ", sec.bytes,
               " bytes, its manifest entry (", numel, " x ", b.dtype(), ") needs ", numel * elem);
    at::Tensor t = at::empty(std::vector<int64_t>(b.shape().begin(), b.shape().end()), dtype);
    r->read(sec, t.data_ptr());
    bytes_read_ += sec.bytes;
    return t;
  }
  const SavedParam& p = param(name);
  if (!merged_weight(p.name)) return im.raw(dir_, p);
  const std::string layer = p.name.substr(0, p.name.size() - 7);
  const at::Tensor a = im.raw(dir_, param(layer + ".lora_A")), b = im.raw(dir_, param(layer + ".lora_B"));
  const at::Tensor w = im.raw(dir_, p);
  return lora::merged({{"weight", w}, {"lora_A", a}, {"lora_B", b}}, lora_scale()).at("weight");
}

bool CheckpointTensors::merged_weight(const std::string& name) const {
  if (!merge_ || !lora::has_leaf(name, "weight")) return false;
  const std::string layer = name.size() > 7 ? name.substr(0, name.size() - 7) : "";
  return std::find(adapted_.begin(), adapted_.end(), layer) != adapted_.end();
}

void CheckpointTensors::read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) {
  Impl& im = *impl_;
  const TensorInfo* info = find(name);
  ZS_REQUIRE(info != nullptr, UsageError, "checkpoint '", dir_, "' has no tensor '", name, "'");
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= info->numel(), UsageError, "checkpoint '", dir_, "', tensor '",
             name, "': elements [", begin, ", ", begin + count, ") lie outside its ", info->numel());
  ZS_REQUIRE(dst.is_contiguous() && dst.device().is_cpu() && dst.numel() == count, UsageError,
             "reading '", name, "': the destination must be a contiguous CPU tensor of ", count, " elements");
  const bool floats = at::isFloatingType(dst.scalar_type()) && at::isFloatingType(info->dtype);
  ZS_REQUIRE(floats || dst.scalar_type() == info->dtype, UsageError, "reading '", name, "' (", info->dtype, ") into ",
             dst.scalar_type(), ": only floating types convert");
  auto it = by_name_.find(name);
  if (it == by_name_.end() || merged_weight(name)) {  // a buffer, or a merged weight: whole, kept for the next range
    if (im.cached_name != name) {
      im.cached = at::Tensor();
      im.cached = read_whole(name).reshape({-1});
      im.cached_name = name;
    }
    dst.copy_(im.cached.narrow(0, begin, count));
    return;
  }
  const SavedParam& p = params_[it->second];
  if (dst.scalar_type() == at::kFloat) {
    im.read_elements(dir_, p.flat, p.offset + begin, count, dst.data_ptr<float>());
    return;
  }
  at::Tensor tmp = at::empty({count}, at::kFloat);
  im.read_elements(dir_, p.flat, p.offset + begin, count, tmp.data_ptr<float>());
  dst.copy_(tmp);
}

void CheckpointTensors::check_rest(const std::vector<std::string>& names) {
  Impl& im = *impl_;
  std::vector<bool> wanted(im.cursors.size(), names.empty());
  for (const std::string& n : names) wanted[param(n).flat] = true;
  for (size_t f = 0; f < im.cursors.size(); ++f) {
    if (!wanted[f]) continue;
    const FlatEntry& fe = im.m.flats(static_cast<int>(f));
    im.consume(dir_, f, fe.padded_numel() * 4 - im.cursors[f].pos, nullptr);
  }
}

}  // namespace zeroshard::ckpt
