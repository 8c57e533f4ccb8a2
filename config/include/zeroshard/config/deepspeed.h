// SPDX-License-Identifier: Apache-2.0
#pragma once
// A DeepSpeed config (ds_config.json) read as zeroshard config keys, so a job that ran under
// DeepSpeed starts here with the file it already has: `--deepspeed ds_config.json` on any program
// that takes a config (after --config, before --set; build_config in config.h).
//
// Each DeepSpeed key becomes zero or more `key=value` assignments of zeroshard's schema, applied as
// --set would apply them (docs/deepspeed.md has the table, with the traps: DeepSpeed's "Adam" is
// AdamW unless adam_w_mode is false; gradient_accumulation_steps is train.micro_batches; the global
// batch is micro x accumulation x world size). A key whose value asks for something zeroshard does
// anyway (overlap_comm true, "auto" tuning knobs) sets nothing; a key or value with no meaning here
// (ZeRO stage 1, a log warmup, 1-bit Adam, a numeric bucket size, an unknown key) is a ConfigError
// naming the file and the DeepSpeed key, so nothing in the file is silently ignored.

#include <string>
#include <vector>

namespace zeroshard {

struct DeepSpeedSetting {
  std::string assignment;     // "sharding.strategy=FULL_SHARD", as --set takes it
  std::string deepspeed_key;  // where it came from, e.g. "zero_optimization.stage"
};

// The settings of the JSON text `json` (`source` names it in errors). `world_size`: the job's
// ranks, needed only when the file gives train_micro_batch_size_per_gpu without train_batch_size
// (<= 0: unknown, then that is an error saying so) and to check the three batch keys agree.
std::vector<DeepSpeedSetting> deepspeed_settings(const std::string& json, const std::string& source, int world_size);

// The same for a file; the world size is the launcher's (mpirun, srun, torchrun variables).
std::vector<DeepSpeedSetting> load_deepspeed_config(const std::string& path);

}  // namespace zeroshard
