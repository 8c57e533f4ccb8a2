// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hugging Face checkpoints of the Llama family into a (sharded) LlamaForCausalLM: the directory's
// weights (zeroshard/formats/tensor_dir.h: model.safetensors, sharded safetensors with their index,
// pytorch_model.bin) are checked against what config.json says the model holds, then each rank
// reads only the byte ranges of its own shards (zeroshard/checkpoint/pretrained.h). Stored dtypes
// bf16, fp16 and fp32 convert into the fp32 master shards.
//
//   zeroshard::models::load_hf_weights(engine, cfg, "Llama-3.2-1B");   // collective
//
// Strict: one CheckpointError lists every tensor that is missing, unexpected (with its file), of
// another shape than config.json makes it (with its file and both shapes) or of a dtype that is
// not a float; nothing is loaded. A tied head (tie_word_embeddings) may be absent from the files,
// or be stored as the embedding's alias; the rotary inv_freq buffers older checkpoints carry are
// derived from the config and skipped. LoRA adapters of the model are not required from the files.

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/models/llama_config.h"
#include "zeroshard/checkpoint/pretrained.h"

namespace zeroshard {
class ShardingEngine;
class TensorDirectory;
}  // namespace zeroshard

namespace zeroshard::models {

// The tensors a checkpoint of `c` holds, Hugging Face's names and shapes, in model order (the
// tied head is left out).
std::vector<TensorInfo> hf_tensors(const LlamaConfig& c);

// Checks `dir`'s tensors against `c` (see above); CheckpointError listing every problem. Any
// TensorFile under Hugging Face's names may be checked (a TensorDirectory names each tensor's file).
void check_hf_checkpoint(const LlamaConfig& c, const TensorFile& dir);

// Checks, then loads the directory's weights into `engine`'s model (built from `c`) on every rank.
// Collective; a failure on any rank fails every rank.
PretrainedReport load_hf_weights(ShardingEngine& engine, const LlamaConfig& c, const std::string& dir);

}  // namespace zeroshard::models
