// SPDX-License-Identifier: Apache-2.0
#pragma once
// A zeroshard training checkpoint of a Llama-family model (llama_checkpoint.h) out in the layouts
// others load, streamed from the rank files one tensor at a time:
//
// export_hf_directory: a Hugging Face model directory as save_pretrained writes it: config.json
// (the recorded one, torch_dtype set to the dtype written), the weights under Hugging Face's names
// (a tied head once, as model.embed_tokens.weight) in model-0000k-of-0000n.safetensors files of
// at most max_shard_bytes each (a larger tensor gets a file of its own) with
// model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}),
// or one model.safetensors when all fits in one. All ranks of `comm` write in parallel: each takes
// a contiguous run of units (about the same bytes each), reads their tensors one at a time and
// writes its own files; rank 0 writes config.json and the index last. The directory is written
// as <parent>/.<name>.tmp-export and renamed when complete: it appears whole or not at all.
//
// export_peft_adapter: a PEFT LoRA adapter directory: adapter_config.json (peft_type LORA, r,
// lora_alpha, target_modules as Hugging Face module names, lora_dropout, bias "none", task_type
// CAUSAL_LM, ...) and adapter_model.safetensors with PEFT's names
// (base_model.model.<module>.lora_A.weight [r, in], ...lora_B.weight [out, r]).
//
//   zeroshard::models::export_hf_directory("ckpt", "out", {c10::kBFloat16, 5'000'000'000, true}, world.get());
//   zeroshard::models::export_peft_adapter("ckpt", "adapter");
//
// Errors: the checkpoint's (llama_checkpoint.h); CheckpointError for adapters without merge_lora
// (export_hf_directory) or a checkpoint without adapters (export_peft_adapter), or tensors that do
// not fit the recorded config.json; UsageError for an output directory that exists; IoError
// naming the file for writes. A failure on one rank fails every rank; nothing is left but the
// temporary directory.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard {
class Communicator;
}  // namespace zeroshard

namespace zeroshard::models {

struct HfExportOptions {
  // kBFloat16, kHalf or kFloat; unset: config.json's torch_dtype when it is one of those, else fp32.
  std::optional<c10::ScalarType> dtype;
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default, "5GB"
  // Fold LoRA adapters into their weights (W + B A alpha / r): required when the checkpoint has any.
  bool merge_lora = false;
};

struct HfExportReport {
  std::string dir;
  c10::ScalarType dtype = c10::kFloat;
  int files = 0;             // safetensors files in the directory
  int64_t tensors = 0;       // in the directory
  int64_t total_size = 0;    // bytes of tensor data (the index's metadata.total_size)
  int64_t files_here = 0;    // files this rank wrote
  int64_t bytes_here = 0;    // tensor bytes this rank wrote
  int64_t read_here = 0;     // checkpoint bytes this rank read
};

// Collective over `comm` (every rank of the job; null: this process alone).
HfExportReport export_hf_directory(const std::string& ckpt, const std::string& out_dir,
                                   const HfExportOptions& options = {}, Communicator* comm = nullptr);

// transformers' max_shard_size: "5GB" (10^9 bytes), "500MB", "100KB", "2GiB" (2^30), or plain
// bytes; UsageError naming the text otherwise.
int64_t parse_shard_size(const std::string& text);
// "bf16", "fp16", "fp32" (also "bfloat16", "float16", "float32"); UsageError otherwise.
c10::ScalarType hf_dtype_from_string(const std::string& text);

struct PeftExportOptions {
  c10::ScalarType dtype = c10::kFloat;  // of the adapter tensors
  // adapter_config.json's base_model_name_or_path; default: config.json's _name_or_path, else null.
  std::string base_model_name_or_path;
};

struct PeftExportReport {
  std::string dir;
  int64_t layers = 0;                       // adapted layers
  std::vector<std::string> target_modules;  // written as a list, or (empty)
  std::string target_regex;                 // a regular expression, when the adapted layers are only
                                            // some of the modules of those names
  int64_t rank = 0;
  double alpha = 0;
};

// One process (the adapters are small).
PeftExportReport export_peft_adapter(const std::string& ckpt, const std::string& out_dir,
                                     const PeftExportOptions& options = {});

}  // namespace zeroshard::models
