// SPDX-License-Identifier: Apache-2.0
// Checkpoint manifests edited to values that would make a reader index outside its buffers or
// files (zeroshard-ckpt consolidate and export read sections into a flat buffer at
// shard_rank x shard_numel), and a manifest with a flipped byte: each refused by read_manifest
// with a CheckpointError naming the manifest, the flat parameter or rank file, and the field,
// never a crash. Before these checks (the same edits, run against the earlier reader): a
// shard_rank of 1 at group size 1 corrupted the heap under consolidate ("double free or
// corruption", SIGABRT) and a shard_rank of 3 crashed export (SIGSEGV); a numel above padded_numel
// and a world_size of 0 were accepted; a parameter outside its flat parameter or a shape not
// holding its numel surfaced as LibTorch's narrow/view errors (c10::Error, not a CheckpointError);
// a rank file name "../manifest.pb" was opened outside the checkpoint; a flipped byte in a
// parameter name was accepted (no checksum). Shard sizes that do not make up padded_numel, an index
// past the file's end and a section of 2^62 bytes were caught later by other checks, with
// messages that did not name the manifest field. One rank, one save (about 2 s).

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <google/protobuf/unknown_field_set.h>

#include "common/test_util.h"
#include "zeroshard/base/crc32c.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message of an error's what() (after "zeroshard <kind> [rank, host, file:line]: ").
std::string message_of(const std::string& what) {
  const size_t at = what.find("]: ");
  return at == std::string::npos ? what : what.substr(at + 3);
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class ManifestChecks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = (fs::current_path() / "ckpt_test_manifest_checks").string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    zs_test::GptTrainer t;
    auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
    zs::CheckpointOptions co;
    co.dir = root_;
    zs::Checkpointer ckpt(*t.engine, co);
    t.train(*opt, 0, 1);
    zs::TrainingState st;
    st.step = 1;
    dir_ = ckpt.save(*opt, st);
    good_ = slurp(manifest());
    good_rank_file_ = slurp(rank_file());
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void TearDown() override {
    spit(manifest(), good_);
    spit(rank_file(), good_rank_file_);
  }
  static std::string rank_file() { return dir_ + "/rank-0.zsr"; }

  static std::string manifest() { return dir_ + "/" + zs::ckpt::kManifestName; }
  static zs::ckpt::Manifest parsed() {
    zs::ckpt::Manifest m;
    EXPECT_TRUE(m.ParseFromString(good_));
    return m;
  }
  // The error consolidate throws after `edit` of the manifest (rewritten with a valid checksum, so
  // that the field checks are what refuses it).
  std::string consolidate_error(const std::function<void(zs::ckpt::Manifest&)>& edit) {
    zs::ckpt::Manifest m = parsed();
    edit(m);
    spit(manifest(), zs::ckpt::manifest_bytes(m));
    return message_of(zs::test::error_text_of<zs::CheckpointError>(
        [] { zs::ckpt::consolidate(dir_, root_ + "/out.pt", at::kFloat); }));
  }
  std::string prefix() const { return "'" + manifest() + "': "; }
  static std::string flat0() {
    const zs::ckpt::Manifest m0 = parsed();
    const auto& fe = m0.flats(0);
    return "flat parameter 0 (unit '" + fe.unit() + "', '" + fe.name() + "'): ";
  }

  static std::string root_, dir_, good_, good_rank_file_;
};
std::string ManifestChecks::root_, ManifestChecks::dir_, ManifestChecks::good_, ManifestChecks::good_rank_file_;

TEST_F(ManifestChecks, IntactCheckpointConsolidates) {
  EXPECT_GT(zs::ckpt::consolidate(dir_, root_ + "/out.pt", at::kFloat).parameters, 0);
  EXPECT_TRUE(parsed().has_manifest_crc32c());
}

TEST_F(ManifestChecks, ShardRankOutsideTheGroup) {
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_rank_files(0)->set_shard_rank(1); }),
            prefix() + "rank file 'rank-0.zsr': shard_rank 1 is outside [0, shard group size 1) or held by two files");
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_rank_files(0)->set_shard_rank(-1); }),
            prefix() + "rank file 'rank-0.zsr': shard_rank -1 is outside [0, shard group size 1) or held by two files");
}

TEST_F(ManifestChecks, GroupTimesShardNumelIsNotPaddedNumel) {
  const zs::ckpt::Manifest m0 = parsed();
  const auto& fe = m0.flats(0);
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) {
              m.mutable_flats(0)->set_shard_numel(m.flats(0).shard_numel() * 2);
            }),
            prefix() + flat0() + "shard_numel " + std::to_string(fe.shard_numel() * 2) +
                " x shard group size 1 is not padded_numel " + std::to_string(fe.padded_numel()));
  // The product overflowing int64 is no way around it.
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_flats(0)->set_shard_numel(int64_t{1} << 62); }),
            prefix() + flat0() + "shard_numel 4611686018427387904 x shard group size 1 is not padded_numel " +
                std::to_string(fe.padded_numel()));
}

TEST_F(ManifestChecks, NumelAbovePaddedNumel) {
  const zs::ckpt::Manifest m0 = parsed();
  const auto& fe = m0.flats(0);
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_flats(0)->set_numel(m.flats(0).padded_numel() + 1); }),
            prefix() + flat0() + "numel " + std::to_string(fe.padded_numel() + 1) + " is not within [0, padded_numel " +
                std::to_string(fe.padded_numel()) + "]");
}

TEST_F(ManifestChecks, ParameterOutsideItsFlat) {
  const zs::ckpt::Manifest m0 = parsed();
  const auto& fe = m0.flats(0);
  const auto& p = fe.params(0);
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) {
              m.mutable_flats(0)->mutable_params(0)->set_offset(m.flats(0).numel());
            }),
            prefix() + flat0() + "parameter '" + p.name() + "': offset " + std::to_string(fe.numel()) + " + numel " +
                std::to_string(p.numel()) + " is not within the flat parameter's numel " + std::to_string(fe.numel()));
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_flats(0)->mutable_params(0)->set_offset(-1); }),
            prefix() + flat0() + "parameter '" + p.name() + "': offset -1 + numel " + std::to_string(p.numel()) +
                " is not within the flat parameter's numel " + std::to_string(fe.numel()));
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_flats(0)->mutable_params(0)->add_shape(2); }),
            prefix() + flat0() + "parameter '" + p.name() + "': its shape does not hold numel " +
                std::to_string(p.numel()) + " elements");
}

TEST_F(ManifestChecks, RankFileFields) {
  const zs::ckpt::Manifest m0 = parsed();
  const auto& rf = m0.rank_files(0);
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) {
              m.mutable_rank_files(0)->set_index_offset(m.rank_files(0).bytes());
            }),
            prefix() + "rank file 'rank-0.zsr': its index (" + std::to_string(rf.index_bytes()) + " bytes at offset " +
                std::to_string(rf.bytes()) + ") lies outside its " + std::to_string(rf.bytes()) + " bytes");
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.mutable_rank_files(0)->set_file("../manifest.pb"); }),
            prefix() + "rank file '../manifest.pb': the file name is not a name inside the checkpoint directory");
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.set_world_size(0); }),
            prefix() + "world_size 0 is not within [1, 1048576]");
  EXPECT_EQ(consolidate_error([](zs::ckpt::Manifest& m) { m.set_shard_group_size(2); }),
            prefix() + "shard_group_size 2 is not within [1, world size 1]");
}

// A rank file whose index (consistent with the manifest's checksums) puts a section outside the
// data: refused when the file is opened. Before, the index was taken as it was: consolidate's
// section size check caught this one, but the readers of RNG and user sections allocate a
// section's recorded size whole, and offset + bytes could overflow past the bounds check.
TEST_F(ManifestChecks, SectionOutsideItsRankFile) {
  zs::ckpt::Manifest m = parsed();
  zs::ckpt::RankFile& rf = *m.mutable_rank_files(0);
  const std::string bytes = good_rank_file_;
  google::protobuf::UnknownFieldSet index;  // io's RankFileIndex, edited field by field
  ASSERT_TRUE(index.ParseFromString(bytes.substr(static_cast<size_t>(rf.index_offset()))));
  google::protobuf::UnknownFieldSet* section = nullptr;
  google::protobuf::UnknownFieldSet parsed_section;
  int at = -1;
  for (int i = 0; i < index.field_count() && at < 0; ++i) {
    if (index.field(i).number() == 3) at = i;  // the first section
  }
  ASSERT_GE(at, 0);
  ASSERT_TRUE(parsed_section.ParseFromString(index.field(at).length_delimited()));
  section = &parsed_section;
  std::string name;
  int64_t offset = 0;
  for (int i = 0; i < section->field_count(); ++i) {
    auto* f = section->mutable_field(i);
    if (f->number() == 1) name = f->length_delimited();
    if (f->number() == 4) offset = static_cast<int64_t>(f->varint());
    if (f->number() == 5) f->set_varint(uint64_t{1} << 62);  // its bytes
  }
  ASSERT_FALSE(name.empty());
  section->SerializeToString(index.mutable_field(at)->mutable_length_delimited());
  std::string idx;
  ASSERT_TRUE(index.SerializeToString(&idx));
  spit(rank_file(), bytes.substr(0, static_cast<size_t>(rf.index_offset())) + idx);
  rf.set_bytes(rf.index_offset() + static_cast<int64_t>(idx.size()));
  rf.set_index_bytes(static_cast<int64_t>(idx.size()));
  rf.set_index_crc32c(zs::crc32c(idx.data(), idx.size()));
  rf.set_crc32c(zs::crc32c(idx.data(), idx.size(), zs::crc32c(bytes.data(), 16)));
  spit(manifest(), zs::ckpt::manifest_bytes(m));
  EXPECT_EQ(message_of(zs::test::error_text_of<zs::CheckpointError>(
                [] { zs::ckpt::consolidate(dir_, root_ + "/out.pt", at::kFloat); })),
            "checkpoint rank file '" + rank_file() + "': section '" + name + "' (" + std::to_string(uint64_t{1} << 62) +
                " bytes at offset " + std::to_string(offset) + ") lies outside the data before the index at offset " +
                std::to_string(rf.index_offset()));
}

// Export (safetensors) reads the same manifest: refused the same way.
TEST_F(ManifestChecks, ExportRefusesToo) {
  zs::ckpt::Manifest m = parsed();
  m.mutable_rank_files(0)->set_shard_rank(3);
  spit(manifest(), zs::ckpt::manifest_bytes(m));
  EXPECT_EQ(message_of(zs::test::error_text_of<zs::CheckpointError>(
                [] { zs::ckpt::export_safetensors(dir_, root_ + "/out.safetensors", at::kFloat); })),
            prefix() + "rank file 'rank-0.zsr': shard_rank 3 is outside [0, shard group size 1) or held by two files");
}

TEST_F(ManifestChecks, FlippedByteIsAChecksumMismatch) {
  const std::string name = parsed().flats(0).params(0).name();
  const size_t at = good_.find(name);
  ASSERT_NE(at, std::string::npos);
  std::string bad = good_;
  bad[at] ^= 0x01;  // still a valid manifest, naming another parameter
  spit(manifest(), bad);
  const std::string err = message_of(
      zs::test::error_text_of<zs::CheckpointError>([] { zs::ckpt::consolidate(dir_, root_ + "/out.pt", at::kFloat); }));
  EXPECT_EQ(err.rfind("checksum mismatch in '" + manifest() + "': CRC-32C ", 0), 0u) << err;
  EXPECT_NE(err.find("; the file was changed or damaged"), std::string::npos) << err;
  // A byte flipped in the stored checksum itself.
  bad = good_;
  bad.back() ^= 0x40;
  spit(manifest(), bad);
  const std::string err2 = message_of(zs::test::error_text_of<zs::CheckpointError>([] { zs::ckpt::read_manifest(dir_); }));
  EXPECT_EQ(err2.rfind("checksum mismatch in '" + manifest() + "'", 0), 0u) << err2;
}

// Manifests written before they carried a checksum still load.
TEST_F(ManifestChecks, ManifestWithoutChecksumLoads) {
  zs::ckpt::Manifest m = parsed();
  m.clear_manifest_crc32c();
  spit(manifest(), m.SerializeAsString());
  EXPECT_GT(zs::ckpt::consolidate(dir_, root_ + "/out.pt", at::kFloat).parameters, 0);
}

// consolidate writes a temporary file beside the output and renames it: when writing fails, the
// earlier output stays whole. Here the temporary name is taken by a directory, so the write fails
// at once. Before, consolidate wrote straight to the output (this one succeeded and replaced it; a
// crash in the middle left it truncated).
TEST_F(ManifestChecks, ConsolidateWritesThroughATemporaryName) {
  const std::string out = root_ + "/kept.pt";
  spit(out, "the earlier export");
  fs::create_directories(out + ".tmp");
  const std::string err = message_of(
      zs::test::error_text_of<zs::CheckpointError>([&] { zs::ckpt::consolidate(dir_, out, at::kFloat); }));
  EXPECT_EQ(err.rfind("cannot write the consolidated model to '" + out + ".tmp' (for '" + out + "'): ", 0), 0u) << err;
  EXPECT_EQ(slurp(out), "the earlier export");
  fs::remove_all(out + ".tmp");
  EXPECT_GT(zs::ckpt::consolidate(dir_, out, at::kFloat).parameters, 0);
  EXPECT_NE(slurp(out), "the earlier export");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// A manifest that promises more bytes than the rank files hold, consistent in itself (a flat of
// 2^40 elements; a buffer of 2^40): the exporters' reader (CheckpointTensors) refuses it when it
// opens, from the files' indexes, before allocating by the manifest's sizes. Before, read_whole
// allocated 4 TiB first (at::empty: LibTorch's c10::Error "not enough memory", not a
// CheckpointError).
TEST_F(ManifestChecks, ManifestPromisingMoreThanTheFilesHoldIsRefusedBeforeAllocating) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  zs::ckpt::Manifest m = parsed();
  zs::ckpt::FlatEntry& fe = *m.mutable_flats(0);
  const int64_t real_bytes = fe.shard_numel() * 4;
  fe.set_padded_numel(kHuge);
  fe.set_shard_numel(kHuge);
  fe.set_numel(kHuge);
  fe.mutable_params(0)->set_numel(kHuge);
  fe.mutable_params(0)->clear_shape();
  fe.mutable_params(0)->add_shape(kHuge);
  spit(manifest(), zs::ckpt::manifest_bytes(m));
  EXPECT_EQ(message_of(zs::test::error_text_of<zs::CheckpointError>([] { zs::ckpt::CheckpointTensors c(dir_); })),
            "'" + rank_file() + "' section '" + fe.name() + "/param' has " + std::to_string(real_bytes) +
                " bytes, the manifest's flat parameter '" + fe.name() + "' of unit '" + fe.unit() +
                "' has 1099511627776 fp32 elements per shard (4398046511104 bytes)");

  m = parsed();
  zs::ckpt::BufferEntry& b = *m.add_buffers();
  b.set_name("huge");
  b.set_dtype("Float");
  b.add_shape(kHuge);
  spit(manifest(), zs::ckpt::manifest_bytes(m));
  zs::ckpt::CheckpointTensors c(dir_);
  EXPECT_EQ(message_of(zs::test::error_text_of<zs::CheckpointError>([&] { c.read_whole("huge"); })),
            "checkpoint file '" + rank_file() + "' has no section 'buffer/huge'");
}

}  // namespace
