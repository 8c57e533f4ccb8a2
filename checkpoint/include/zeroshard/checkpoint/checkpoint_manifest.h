// SPDX-License-Identifier: Apache-2.0
#pragma once
// The checkpoint manifest (sharding/proto/checkpoint.proto), for the checkpoint's own code and
// tools that read a checkpoint's structure. Like config/config.h this header includes generated
// protobuf code (checkpoint.pb.h); the rest of the checkpoint API (checkpoint.h,
// checkpoint_format.h) does not.

#include <memory>
#include <string>

#include "checkpoint.pb.h"
#include "zeroshard/io/rank_file.h"
#include "zeroshard/checkpoint/checkpoint_format.h"

namespace zeroshard {
struct ModelDescription;
}  // namespace zeroshard

namespace zeroshard::ckpt {

inline constexpr int kFormatVersion = 1;

// Reads <step_dir>/manifest.pb. CheckpointError if the directory is not a checkpoint (naming what
// is missing), the manifest does not parse, its checksum does not match its bytes, its
// format_version is newer than kFormatVersion, or a field that locates data (shard ranks, sizes,
// offsets, shapes, file names) contradicts another: see check_manifest.
Manifest read_manifest(const std::string& step_dir);

// The bytes of manifest.pb for `m`: its serialization followed by manifest_crc32c, the CRC-32C of
// what precedes it (m's own manifest_crc32c is ignored).
std::string manifest_bytes(Manifest m);

// CheckpointError naming `path`, the flat parameter (unit and name), rank file or buffer, and the
// field, for any field that readers use to index memory or files and that lies outside what the
// others allow: shard group and world sizes >= 1; per flat 0 <= numel <= padded_numel ==
// shard_numel x shard group size, each parameter's offset + numel within numel and its shape's
// product equal to its numel; buffer shapes >= 0 without overflow; one shard file per shard rank
// in [0, shard group size), ranks in [0, world size), file names without '/', the index inside the
// file.
void check_manifest(const Manifest& m, const std::string& path);

// The run's description of its model (checkpoint.h) into the manifest, and back: hf_config empty
// and lora unset where the run gave none (and in checkpoints saved before manifests held them).
void describe_model(Manifest& m, const ModelDescription& d);
ModelDescription model_description(const Manifest& m);

// Human-readable manifest summary (zeroshard-ckpt info).
std::string describe_manifest(const Manifest& m);

// The manifest's record of a rank file, as the io layer's RankFileRecord (which the rank file
// reader checks the file against), and back.
RankFileRecord to_record(const RankFile& rf);
void set_record(RankFile* rf, const RankFileRecord& r);
// A reader of <dir>/<rf.file()>, checked against the manifest's record.
std::unique_ptr<RankFileReader> open_rank_file(const std::string& dir, const RankFile& rf,
                                               std::shared_ptr<IoEngine> io = nullptr);

}  // namespace zeroshard::ckpt
