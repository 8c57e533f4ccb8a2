// SPDX-License-Identifier: Apache-2.0
#pragma once
// The checkpoint directory layout and what can be done with a checkpoint without an engine or MPI
// (zeroshard-ckpt uses these): find, describe, verify, consolidate. The manifest itself (a
// protobuf message) is in checkpoint_manifest.h; rank files are written and read by the io layer
// (zeroshard/io/rank_file.h).
//
//   <dir>/step-<N>/manifest.pb      complete checkpoint (written last, then the directory renamed)
//   <dir>/step-<N>/rank-<R>.zsr     one rank file per world rank
//   <dir>/.tmp-step-<N>/            a save in progress (or one that died): never loaded
//   <dir>/latest                    text: the name of the newest complete checkpoint
//
// Every error is a CheckpointError naming the file (and section/offset where it applies).

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::ckpt {

inline constexpr const char* kManifestName = "manifest.pb";
inline constexpr const char* kLatestName = "latest";

std::string rank_file_name(int rank);    // "rank-3.zsr"
std::string step_dir_name(int64_t step);  // "step-00000012"

// Complete checkpoints (step directories holding a manifest) under `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// The same, in the order they were saved, oldest first: by the manifests' save sequence
// (checkpoints written before it existed come first, by step). After a run resumed from an older
// step, its saves are the newest although their steps are lower than the abandoned run's.
struct SavedCheckpoint {
  int64_t sequence = 0;  // the manifest's save_sequence (0: none)
  int64_t step = 0;
  std::string path;
};
std::vector<SavedCheckpoint> list_checkpoints_by_save(const std::string& dir);
// `path` may be a step directory, or a checkpoint root (its `latest`, else its most recently
// saved complete checkpoint). CheckpointError naming the path when nothing loadable is there.
std::string resolve_checkpoint(const std::string& path);

// The manifest of the checkpoint at `path` (see resolve_checkpoint), readably (zeroshard-ckpt info).
std::string describe_checkpoint(const std::string& path);
// The config text of the run that saved the checkpoint at `path`, and its step.
struct SavedRun {
  int64_t step = 0;
  std::string config_text;
};
SavedRun saved_run(const std::string& path);

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

// Writes the checkpoint's parameters and buffers as a safetensors file (zeroshard/formats/tensor_file.h)
// in `dtype` (kFloat or kBFloat16; integer buffers keep theirs), streaming: one unit is assembled
// at a time and written, so host memory stays near the largest unit, not the model. Tied
// parameters are written once, under their first name; the metadata entry "zeroshard.aliases"
// lists the other names ("alias=name;..."). The file appears only when complete.
// merge_lora_scale > 0: fold every LoRA adapter pair ("X.lora_A", "X.lora_B") into "X.weight" with
// this scale (the saving run's alpha / rank; zeroshard-ckpt reads it from the checkpoint's config)
// and leave the adapters out, so the file loads into the model without adapters; CheckpointError
// when the checkpoint has no adapters. 0: no merge.
ConsolidateStats export_safetensors(const std::string& ckpt_path, const std::string& out_path, c10::ScalarType dtype,
                                    double merge_lora_scale = 0);

// Checks every rank file's size and CRC and every section's CRC; returns a line per file.
std::string verify_checkpoint(const std::string& ckpt_path);

}  // namespace zeroshard::ckpt
