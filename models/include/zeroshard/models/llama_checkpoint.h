// SPDX-License-Identifier: Apache-2.0
#pragma once
// A zeroshard training checkpoint of a Llama-family model as a model again: the config.json and
// LoRA options the run recorded (CheckpointOptions::model, zeroshard/checkpoint/checkpoint.h), and
// its weights loaded into a model built from them, each rank reading whole tensors one at a time
// (zeroshard/checkpoint/checkpoint_tensors.h) and keeping its shards. zeroshard-eval and the
// exports (hf_export.h, gguf_export.h) start here.
//
//   const auto ck = zeroshard::models::LlamaCheckpoint::open("ckpt");   // a step directory or a root
//   zeroshard::ShardingOptions so;
//   if (ck.lora) so.unit_hooks.push_back(zeroshard::lora::unit_hook(*ck.lora));
//   zeroshard::ShardedInit init(session, so);
//   zeroshard::models::LlamaForCausalLM model(zeroshard::models::LlamaOptions{ck.config});
//   zeroshard::ShardingEngine engine(init, model.ptr());
//   zeroshard::models::load_checkpoint_weights(engine, ck);             // collective
//
// Errors: CheckpointError naming the checkpoint when it does not record its config.json or has
// adapters without their LoRA options; the config's own errors (llama_config.h) name the manifest.

#include <optional>
#include <string>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/models/llama_config.h"

namespace zeroshard {
class ShardingEngine;
}  // namespace zeroshard

namespace zeroshard::models {

struct LlamaCheckpoint {
  std::string dir;                    // the step directory
  std::string config_json;            // the recorded config.json text
  LlamaConfig config;                 // parsed from it
  std::optional<lora::Options> lora;  // set when the checkpoint holds LoRA adapters
  static LlamaCheckpoint open(const std::string& path, const LlamaConfigOptions& options = {});
};

// Loads the checkpoint's parameters (adapters included) into `engine`'s model, built from
// ckpt.config with ckpt.lora (strict: every name and shape must match). Collective.
PretrainedReport load_checkpoint_weights(ShardingEngine& engine, const LlamaCheckpoint& ckpt);

}  // namespace zeroshard::models
