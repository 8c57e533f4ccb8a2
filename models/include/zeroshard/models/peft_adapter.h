// SPDX-License-Identifier: Apache-2.0
#pragma once
// A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, as PEFT's
// save_pretrained writes them) onto a base Llama-family model, to continue training or to merge:
// read_peft_adapter checks the adapter against the base (its config.json and its weights' shapes)
// and gives the LoRA options to build the model with; load_peft_adapter loads the adapter's tensors
// into the model's lora_A / lora_B once load_hf_weights has loaded the base.
//
//   const auto base = zeroshard::models::LlamaConfig::read("Llama-3.2-1B");
//   const auto adapter = zeroshard::models::read_peft_adapter("my-adapter", base, "Llama-3.2-1B");
//   zeroshard::ShardingOptions so;
//   so.unit_hooks.push_back(zeroshard::lora::unit_hook(adapter.lora));
//   ... build the model under a ShardedInit, wrap it in a ShardingEngine ...
//   zeroshard::models::load_hf_weights(engine, base, "Llama-3.2-1B");
//   zeroshard::models::load_peft_adapter(engine, adapter);   // collective
//
// Read as PEFT reads them: peft_type "LORA"; r; lora_alpha (scale alpha / r, or alpha / sqrt(r)
// with use_rslora); lora_dropout; target_modules (a list: every module whose name is an entry or
// ends in "." + entry; a string: a regular expression matching whole names); bias "none". Refused,
// each a ConfigError naming adapter_config.json and the key: another peft_type or task_type, bias
// terms, DoRA, rank_pattern / alpha_pattern, layers_to_transform, modules_to_save,
// fan_in_fan_out, a target the base has no linear module for, and targets that adapt some decoder
// layers and not others (zeroshard adapts every layer alike). The tensors: IoError for a missing
// adapter_model.safetensors; one CheckpointError listing every tensor that is missing, unexpected
// or of a shape that does not fit the base weight (both tensors, both shapes, both files).

#include <string>
#include <vector>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/models/llama_config.h"

namespace zeroshard {
class ShardingEngine;
}  // namespace zeroshard

namespace zeroshard::models {

struct PeftAdapter {
  std::string dir;
  std::string weights;     // <dir>/adapter_model.safetensors
  lora::Options lora;      // rank, alpha (alpha / rank is PEFT's scale), dropout, targets as globs
  std::vector<std::string> layers;  // the adapted modules (the model's names), in the model's order
  std::string base_model_name_or_path;  // "" when adapter_config.json has none
};

// `base`: the base model's config; `base_dir`: its directory (the weights' shapes and files).
PeftAdapter read_peft_adapter(const std::string& dir, const LlamaConfig& base, const std::string& base_dir);

// Loads the adapter's tensors into the adapters of `engine`'s model (built with adapter.lora).
// CheckpointError when the model's adapters are not exactly the adapter's. Collective.
PretrainedReport load_peft_adapter(ShardingEngine& engine, const PeftAdapter& adapter);

}  // namespace zeroshard::models
