// SPDX-License-Identifier: Apache-2.0
#pragma once
// RunOptions: a whole run's configuration as the plain structs of the layers that act on it, made
// once at the edge by resolve() (resolve.h) and handed down piece by piece; and the run-level
// structs of the training programs (the loop, the data, sampling, progress), defined here. No
// field is parsed or checked again below: a valid config (config.h) gives valid options. The
// defaults of every struct are the schema's defaults (tests/config/test_resolve.cpp holds this).
// Plain values, like LevelDB's options.h.

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/core/session_options.h"
#include "zeroshard/engine/options.h"
#include "zeroshard/estimate/estimate.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/optim/grad_scaler.h"
#include "zeroshard/optim/lr_scheduler.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"

namespace zeroshard {

// The training loop (train.*, with optimizer.grad_clip_norm, checkpoint.interval_steps, the
// loader's data.* keys and runtime.seed).
struct TrainOptions {
  int64_t steps = 0;          // optimizer steps; 0: `epochs` passes over the data
  int epochs = 1;
  int64_t batch_size = 32;    // global: samples per optimizer step over all ranks
  int micro_batches = 1;      // per optimizer step (gradient accumulation)
  bool no_sync = false;       // accumulate unsharded, reduce once per step
  int64_t eval_interval = 0;  // also evaluate every N steps; 0: off (always at the end)
  int eval_batches = 0;       // per rank per evaluation; 0: the whole held-out set
  int log_interval = 10;      // progress lines every N steps when not on a terminal
  double grad_clip_norm = 0;  // optimizer.grad_clip_norm; 0: no clipping
  int checkpoint_interval = 0;  // checkpoint.interval_steps; 0: only at the end
  double stop_deadline_s = 0;   // after a stop signal, the most seconds until exit; 0: none
  // The loader (data.*).
  int num_workers = 2;
  int prefetch_batches = 4;
  bool pin_memory = true;
  bool shuffle = true;
  int64_t limit_train_samples = 0;
  int64_t limit_eval_samples = 0;
  uint64_t seed = 1234;  // runtime.seed: the shuffle of every epoch
};

// Where a program's data set is (data.path, data.val_fraction).
enum class DataFormat { kAuto, kBytes, kTokenShards, kJsonl, kImages };  // data.format

struct DataOptions {
  std::string path;            // empty: the program's default location
  double val_fraction = 0.05;  // held out for validation (the end of every file of a text corpus;
                               // the last samples of tokenized data)
  DataFormat format = DataFormat::kAuto;
};

// Where zeroshard-train's model comes from (model.path, model.units, model.unit_types).
struct ModelSource {
  std::string path;                     // empty: the built-in GPT; else a Hugging Face directory or a TorchScript file
  std::vector<std::string> units;       // TorchScript: submodule path patterns of the sharded units
  std::vector<std::string> unit_types;  // TorchScript: class names whose submodules are units
};

// Text a language model generates after training (sample.*).
struct SampleOptions {
  int tokens = 300;           // 0: no sample
  double temperature = 0.8;
  int top_k = 40;             // 0: all tokens
  std::string prompt;         // empty: start after a newline
  uint64_t seed = 42;         // the sampling RNG's (rank 0 draws)
};

// How training progress is shown (logging.progress, logging.tensorboard_dir).
enum class ProgressStyle {
  kAuto,   // AUTO: a bar on a terminal not started by Open MPI's mpirun, lines otherwise
  kBar,    // BAR: one line redrawn in place
  kLines,  // LINES: a line every TrainOptions::log_interval steps
};
struct ProgressSettings {
  ProgressStyle style = ProgressStyle::kAuto;
  std::string tensorboard_dir;  // TensorBoard event files go there; empty: none
};

// Everything a run's config says, as the options of the layers that act on it.
struct RunOptions {
  SessionOptions session;          // runtime, comm, logging.level/ranks, memory
  // sharding, precision (but loss_scale), offload.params/grads and the I/O keys, and the unit
  // hooks: NF4 storage of frozen Linear weights (precision.frozen_linear = NF4), LoRA adapters
  // (lora.rank > 0).
  ShardingOptions sharding;
  OptimizerOptions optimizer;      // optimizer.type, lr, betas, eps, weight_decay, momentum, nesterov
  ParamGroupOptions param_groups;  // optimizer.weight_decay, no_decay_1d_and_embeddings, param_groups
  LrScheduleOptions scheduler;     // scheduler.*
  LossScaleOptions loss_scale;     // precision.loss_scale.*
  bool fp16 = false;               // FP16 in precision.param_dtype or reduce_dtype (loss scale AUTO)
  OffloadOptions offload;          // offload.* for the optimizer (target = offload.optimizer)
  CheckpointOptions checkpoint;    // checkpoint.dir, keep_last, async_save
  std::string init_from;           // model.init_from: pretrained weights; empty: none
  PretrainedOptions pretrained;    // model.init_strict, prefixes, renames (LoRA adapters not required)
  lora::Options lora;              // lora.*; rank 0: off
  EstimateOptions estimate;        // what zeroshard-estimate needs of the config (world size: 1)
  models::GptOptions model;        // model.* and activation_checkpointing.* (device: the CPU)
  ModelSource model_source;        // model.path, model.units, model.unit_types
  TrainOptions train;
  DataOptions data;
  SampleOptions sample;
  ProgressSettings progress;
};

}  // namespace zeroshard
