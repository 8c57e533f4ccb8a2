// SPDX-License-Identifier: Apache-2.0
// A checkpoint of a Llama-family model as a model again (llama_checkpoint.h).

#include "zeroshard/models/llama_checkpoint.h"

#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"

namespace zeroshard::models {

LlamaCheckpoint LlamaCheckpoint::open(const std::string& path, const LlamaConfigOptions& options) {
  const ckpt::CheckpointTensors t(path);
  LlamaCheckpoint c;
  c.dir = t.path();
  c.config_json = t.hf_config();
  ZS_REQUIRE(!c.config_json.empty(), CheckpointError, "checkpoint '", c.dir,
             "' does not record the Hugging Face config.json its model was built from (it was saved without "
             "CheckpointOptions::model.hf_config), so it cannot be read as a Llama-family model");
  c.config = LlamaConfig::parse(c.config_json, c.dir + "/manifest.pb (hf_config)", options);
  if (!t.adapted_layers().empty()) {
    t.lora_scale();  // CheckpointError when the LoRA options were not recorded
    c.lora = t.lora();
  }
  return c;
}

PretrainedReport load_checkpoint_weights(ShardingEngine& engine, const LlamaCheckpoint& ckpt) {
  const std::string dir = ckpt.dir;
  return load_pretrained(engine, [dir] { return std::make_unique<ckpt::CheckpointTensors>(dir); });
}

}  // namespace zeroshard::models
