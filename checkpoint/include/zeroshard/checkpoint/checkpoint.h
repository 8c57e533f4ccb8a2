// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training checkpoints of a ShardingEngine: sharded save, exact resume, resharding to another
// world size or strategy on load, async save. Format: zeroshard/checkpoint/checkpoint_format.h.
//
//   zeroshard::Checkpointer ckpt(engine, run.checkpoint);   // RunOptions (zeroshard/config/resolve.h)
//   zeroshard::TrainingState st = ckpt.load(*opt);          // resume (throws if nothing to load)
//   ...
//   ckpt.save(*opt, {.step = step, .per_rank = {{"loader", loader.state()}}});
//
// Save: every rank writes its rank file (its shards, its optimizer state, its RNG state, its
// per-rank entries; ranks of other replicas only the latter two) into <dir>/.tmp-step-<N>/ and
// fsyncs it; rank 0 then writes the manifest (structure, strategy, world size, step, config,
// optimizer and loss-scaler state, global entries, a CRC-32C per file), renames the directory to
// step-<N>, points `latest` at it and deletes checkpoints beyond keep_last. A save that fails on
// any rank (disk full, a dead rank) leaves only a .tmp-* directory, which is never loaded and is
// removed by the next successful save: the previous checkpoint stays intact and `latest`.
// Async save: the shards and optimizer state are copied to host memory on the calling thread, the
// files are written on a background thread (with its own communicator) while training goes on;
// wait() (or the next save, or the destructor) blocks until it is durable and rethrows its error.
// Load: reads the manifest, checks the model structure (naming the first differing parameter and
// both shapes), and gives every rank exactly its part of each flat parameter and of its optimizer
// state under the *current* layout, reading from whichever saved shards overlap it: a checkpoint
// saved at N ranks loads at M ranks, with any strategy, directly. Every section read is
// checksummed. RNG states and per-rank entries are restored only when the world size is unchanged.
// All methods are collective over the engine's ranks; call them between steps (no pending grads).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/optim/grad_scaler.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard {

class IoEngine;

// What a checkpoint records about its model besides the tensors, so that exports need nothing else
// (zeroshard-ckpt export --format hf|peft|gguf, docs/checkpoints.md): stored in every save's
// manifest when given.
struct ModelDescription {
  std::string hf_config;              // the Hugging Face config.json text the model was built from
  std::optional<lora::Options> lora;  // the LoRA adapters' rank, alpha, dropout and targets
};

struct CheckpointOptions {
  std::string dir;        // checkpoint root
  int keep_last = 3;      // complete checkpoints kept
  bool async_save = false;
  // The I/O engine rank files, manifests and `latest` go through (null: default_file_io(),
  // zeroshard/io/rank_file.h). Tests pass a FaultInjectingIo to fail a save like a full disk.
  std::shared_ptr<IoEngine> io;
  ModelDescription model;  // recorded in every save's manifest
};

// What a checkpoint carries besides parameters and optimizer state.
struct TrainingState {
  int64_t step = 0;  // completed optimizer steps
  std::optional<GradScalerState> grad_scaler;
  std::map<std::string, std::string> global;    // saved from rank 0 (e.g. epoch)
  std::map<std::string, std::string> per_rank;  // this rank's (e.g. its data-loader position)
  bool rng_restored = false;                    // load: RNG states were restored
  bool resharded = false;                       // load: saved at another world size or layout
  std::string path;                             // load/save: the step directory
};

class Checkpointer {
 public:
  // Collective (creates the background communicator). `config_text` is stored in the manifest.
  Checkpointer(ShardingEngine& engine, CheckpointOptions options, std::string config_text = "");
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Saves the engine's shards, `optimizer`'s state and `state`; returns the step directory. With
  // async_save, returns once the snapshot is taken (the directory exists only when durable).
  std::string save(ShardedOptimizer& optimizer, const TrainingState& state);
  // Blocks until the last save is durable; rethrows its CheckpointError.
  void wait();
  // The step of the newest durable save of this Checkpointer (-1: none yet).
  int64_t last_durable_step() const;

  // Loads `path` (a step directory or a checkpoint root; empty: options.dir) into the engine and
  // `optimizer`; returns the training state. CheckpointError for anything that does not fit.
  TrainingState load(ShardedOptimizer& optimizer, const std::string& path = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zeroshard
