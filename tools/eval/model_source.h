// SPDX-License-Identifier: Apache-2.0
#pragma once
// What zeroshard-eval scores: a Hugging Face Llama-family directory, a zeroshard checkpoint of such
// a model (its recorded config.json and LoRA options), or a base directory with a PEFT adapter
// directory on it: the config to build the model from, the LoRA to build it with, how to load it.

#include <functional>
#include <optional>
#include <string>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/models/llama_config.h"

namespace zeroshard {
class ShardingEngine;
}  // namespace zeroshard

namespace zs_eval {

struct EvalModel {
  zeroshard::models::LlamaConfig config;
  std::optional<zeroshard::lora::Options> lora;             // build the model with these adapters
  std::function<void(zeroshard::ShardingEngine&)> load;  // collective: every rank
};

// `model`: a directory with config.json, or a checkpoint (a step directory or a root); `adapter`:
// "" or a PEFT adapter directory for the base directory `model`. Errors as the loaders give them
// (a missing config.json names the file).
EvalModel resolve_model(const std::string& model, const std::string& adapter,
                        const zeroshard::models::LlamaConfigOptions& options);

}  // namespace zs_eval
