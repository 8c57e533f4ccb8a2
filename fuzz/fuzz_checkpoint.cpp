// SPDX-License-Identifier: Apache-2.0
// A whole checkpoint step directory (its manifest and rank files) read as the exporters and
// load_pretrained read it (checkpoint/checkpoint_tensors.h): every tensor read whole, then the
// rest of the bytes checked.
//
// Input: a flags byte (low bit: merge LoRA), a 4-byte little-endian length L, L bytes of
// manifest.pb, then the rank files in the order the manifest lists them, each but the last after a
// 4-byte length of its own (the last takes the rest; a manifest listing more files than the input
// holds gives the others the last one's bytes). Checksums would stop almost every
// mutation at the first check, so the harness makes them agree with the mutated bytes before the
// read: for each rank file the manifest records (at most 4) it takes the index to be the file's
// last index_bytes bytes (so data that grew or shrank still finds it), sets each in-range
// section's CRC-32C to that of its bytes, writes the file under the recorded name, and records
// its size, index and checksums in the manifest, whose own checksum it then recomputes. A
// manifest or index that does not parse is written as it came. The checksum checks themselves
// are fuzzed by fuzz_manifest and covered by the checkpoint tests.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <google/protobuf/unknown_field_set.h>

#include "fuzz_input.h"
#include "zeroshard/base/crc32c.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The rank file `raw` with its index (its last rf->index_bytes() bytes) re-serialized with true
// section checksums; `rf` records the result. Returns `raw` unchanged when the index is out of
// range or does not parse.
std::string agree(const std::string& raw, zeroshard::ckpt::RankFile* rf) {
  const int64_t size = static_cast<int64_t>(raw.size());
  const int64_t n = rf->index_bytes(), at = size - n;
  if (n < 0 || n > size || at < 16) return raw;
  // The index is the io layer's private RankFileIndex message (io/proto/rank_file.proto), edited
  // field by field: sections are field 3, each with offset 4, bytes 5 and crc32c 6.
  google::protobuf::UnknownFieldSet index;
  if (!index.ParseFromArray(raw.data() + at, static_cast<int>(n))) return raw;
  for (int i = 0; i < index.field_count(); ++i) {
    google::protobuf::UnknownField* f = index.mutable_field(i);
    if (f->number() != 3 || f->type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    google::protobuf::UnknownFieldSet sec;
    if (!sec.ParseFromString(f->length_delimited())) continue;
    int64_t offset = -1, bytes = -1;
    for (int k = 0; k < sec.field_count(); ++k) {
      const google::protobuf::UnknownField& g = sec.field(k);
      if (g.type() != google::protobuf::UnknownField::TYPE_VARINT) continue;
      if (g.number() == 4) offset = static_cast<int64_t>(g.varint());
      if (g.number() == 5) bytes = static_cast<int64_t>(g.varint());
    }
    if (!(offset >= 16 && bytes >= 0 && offset <= at && bytes <= at - offset)) continue;
    const uint32_t crc = zeroshard::crc32c(raw.data() + offset, static_cast<size_t>(bytes));
    bool set = false;
    for (int k = 0; k < sec.field_count(); ++k) {
      if (sec.field(k).number() == 6 && sec.field(k).type() == google::protobuf::UnknownField::TYPE_VARINT) {
        sec.mutable_field(k)->set_varint(crc);
        set = true;
      }
    }
    if (!set) sec.AddVarint(6, crc);
    sec.SerializeToString(f->mutable_length_delimited());
  }
  std::string idx;
  index.SerializeToString(&idx);
  std::string file = raw.substr(0, static_cast<size_t>(at)) + idx;
  if (file.size() >= 16) std::memcpy(file.data(), zeroshard::kRankFileMagic, 16);
  zeroshard::RankFileRecord r = zeroshard::ckpt::to_record(*rf);
  r.bytes = static_cast<int64_t>(file.size());
  r.index_offset = at;
  r.index_bytes = static_cast<int64_t>(idx.size());
  r.index_crc32c = zeroshard::crc32c(idx.data(), idx.size());
  r.crc32c = zeroshard::crc32c(idx.data(), idx.size(), zeroshard::crc32c(zeroshard::kRankFileMagic, 16));
  zeroshard::ckpt::set_record(rf, r);
  return file;
}

bool safe_name(const std::string& name) {
  return !name.empty() && name.size() < 64 && name.find('/') == std::string::npos && name != "." && name != ".." &&
         name != zeroshard::ckpt::kManifestName;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const bool merge = (data[0] & 1) != 0;
  uint32_t mlen = 0;
  for (int i = 0; i < 4; ++i) mlen |= static_cast<uint32_t>(data[1 + i]) << (8 * i);
  if (mlen > size - 5) return 0;
  const std::string manifest(reinterpret_cast<const char*>(data) + 5, mlen);
  // The rank files: length-prefixed pieces, the last one the rest.
  std::vector<std::string> files;
  size_t pos = 5 + mlen;
  while (files.size() < 3 && size - pos >= 4) {
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(data[pos + i]) << (8 * i);
    if (len > size - pos - 4) break;
    files.emplace_back(reinterpret_cast<const char*>(data) + pos + 4, len);
    pos += 4 + len;
  }
  files.emplace_back(reinterpret_cast<const char*>(data) + pos, size - pos);

  static const std::string dir = zs_fuzz::work_dir() + "/ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  zeroshard::ckpt::Manifest m;
  if (m.ParseFromString(manifest)) {
    for (int i = 0; i < m.rank_files_size() && i < 4; ++i) {
      zeroshard::ckpt::RankFile* rf = m.mutable_rank_files(i);
      const std::string& raw = files[std::min(static_cast<size_t>(i), files.size() - 1)];
      if (safe_name(rf->file())) write_file(dir + "/" + rf->file(), agree(raw, rf));
    }
    write_file(dir + "/" + zeroshard::ckpt::kManifestName, zeroshard::ckpt::manifest_bytes(m));
  } else {
    write_file(dir + "/" + zeroshard::ckpt::kManifestName, manifest);
  }
  zs_fuzz::expect_clean([&] {
    zeroshard::ckpt::CheckpointTensors c(dir, {merge});
    for (const zeroshard::TensorInfo& t : c.tensors()) c.read_whole(t.name);
    c.check_rest();
  });
  return 0;
}
