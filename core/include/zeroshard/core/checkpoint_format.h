#pragma once
// The on-disk checkpoint format (see core/proto/checkpoint.proto): rank files with checksummed
// sections, the manifest, and the directory conventions. Used by the engine's Checkpointer and by
// the zeroshard-ckpt tool; no engine or MPI dependency.
//
//   <dir>/step-<N>/manifest.pb      complete checkpoint (written last, then the directory renamed)
//   <dir>/step-<N>/rank-<R>.zsr     one rank file per world rank
//   <dir>/.tmp-step-<N>-<id>/       a save in progress (or one that died): never loaded
//   <dir>/latest                    text: the name of the newest complete checkpoint
//
// Every error is a CheckpointError naming the file (and section/offset where it applies).

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint.pb.h"

namespace zeroshard::ckpt {

inline constexpr int kFormatVersion = 1;
inline constexpr char kRankFileMagic[17] = "ZSHARD-RANKFILE1";
inline constexpr const char* kManifestName = "manifest.pb";
inline constexpr const char* kLatestName = "latest";

std::string rank_file_name(int rank);
std::string step_dir_name(int64_t step);

// Writes one rank file sequentially: sections, then the index; computes every CRC as it goes.
class RankFileWriter {
 public:
  RankFileWriter(std::string path, int rank, int shard_rank);
  ~RankFileWriter();  // closes (does not delete) an unfinished file
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const void* data, int64_t bytes);
  // Writes the index, fsyncs and closes; returns the manifest's record of this file.
  RankFile finish(const std::string& file_name);

 private:
  void write(const void* data, int64_t bytes);
  std::string path_;
  int fd_ = -1;
  RankFileIndex index_;
  int64_t offset_ = 0;
};

// Reads sections of one rank file, checking it against the manifest's record: size and index
// checksum at open, each section's checksum when read.
class RankFileReader {
 public:
  RankFileReader(std::string path, const RankFile& expected);
  ~RankFileReader();
  RankFileReader(const RankFileReader&) = delete;
  RankFileReader& operator=(const RankFileReader&) = delete;

  const RankFileIndex& index() const { return index_; }
  bool has(const std::string& name) const;
  const Section& section(const std::string& name) const;  // CheckpointError if absent
  // The whole section into `dst` (section.bytes() bytes), checksum verified.
  void read(const Section& s, void* dst) const;
  std::string read_bytes(const std::string& name) const;
  // The file's CRC (magic + index) against the manifest, every section's CRC, and that the
  // sections and index cover the file (reads it once).
  void verify_file() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  RankFile expected_;
  int fd_ = -1;
  RankFileIndex index_;
};

// Reads <step_dir>/manifest.pb. CheckpointError if the directory is not a checkpoint (naming what
// is missing), the manifest does not parse, or its format_version is newer than kFormatVersion.
Manifest read_manifest(const std::string& step_dir);
// Writes <dir>/<name> atomically (temp file, fsync, rename, fsync of dir).
void write_file_atomic(const std::string& dir, const std::string& name, const std::string& contents);
void fsync_dir(const std::string& dir);

// Complete checkpoints (step directories holding a manifest) under `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// `path` may be a step directory, or a checkpoint root (its `latest`, else its newest complete
// checkpoint). CheckpointError naming the path when nothing loadable is there.
std::string resolve_checkpoint(const std::string& path);

// Human-readable manifest summary (zeroshard-ckpt info).
std::string describe_manifest(const Manifest& m);

}  // namespace zeroshard::ckpt

#include <c10/core/ScalarType.h>

namespace zeroshard::ckpt {

struct ConsolidateStats {
  int64_t parameters = 0;  // names written (tied parameters count once per name)
  int64_t elements = 0;
  int64_t buffers = 0;
  int64_t peak_flat_bytes = 0;  // largest unit assembled at once
};

// Writes the full, unsharded state dict of the checkpoint at `ckpt_path` (a step directory or a
// root) to `out_path` in the format `torch::load(module, out_path)` reads into the plain, unwrapped
// model: nested archives per submodule, parameters under every (tied) name, buffers as buffers.
// `dtype`: kFloat or kBFloat16 (then load into a model converted with ->to(kBFloat16)). Units are
// assembled one at a time from the rank files (checksums verified), but LibTorch's archive
// writer keeps every tensor until it saves: peak host memory is the whole model in `dtype`.
ConsolidateStats consolidate(const std::string& ckpt_path, const std::string& out_path, c10::ScalarType dtype);

// Checks every rank file's size and CRC and every section's CRC; returns a line per file.
std::string verify_checkpoint(const std::string& ckpt_path);

}  // namespace zeroshard::ckpt
