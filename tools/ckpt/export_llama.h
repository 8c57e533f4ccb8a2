// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-ckpt export for checkpoints of Llama-family models: --format hf (a Hugging Face
// directory, written by every rank when run under mpirun), peft (the LoRA adapters as a PEFT
// adapter directory) and gguf (one GGUF file for llama.cpp, LoRA merged). Prints what it wrote on
// rank 0; errors are thrown (zeroshard errors), as in the rest of the tool.

#include <string>

namespace zs_ckpt {

struct LlamaExportArgs {
  std::string path, out, format, dtype, max_shard_size, base_model;
  bool merge_lora = false;
  std::string tokenizer;  // --format gguf: the tokenizer to embed (default: the model directory's own)
};

// Whether `path` is a Hugging Face model directory (config.json inside) rather than a checkpoint.
bool is_hf_directory(const std::string& path);

// --format gguf takes a Hugging Face directory or a checkpoint; when neither it nor --tokenizer
// gives a tokenizer, a line on stderr says that the file carries the byte-level vocabulary.
int export_llama(const LlamaExportArgs& a, char* argv0);

}  // namespace zs_ckpt
