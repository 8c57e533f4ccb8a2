// SPDX-License-Identifier: Apache-2.0
#pragma once
// A Hugging Face Llama-family directory (config.json + weights, hf_checkpoint.h), or a zeroshard
// training checkpoint of such a model, to one GGUF file that llama.cpp loads, streamed tensor by
// tensor (host memory near the largest tensor).
//
// Names and layout as llama.cpp's converter writes them: token_embd, blk.N.{attn_norm, attn_q,
// attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down} (.weight, and .bias where
// the model has biases), output_norm, output (left out when the head is tied); architecture
// "llama" for llama and mistral, "qwen2" for qwen2, with <arch>.context_length, embedding_length,
// block_count, feed_forward_length, attention.head_count, attention.head_count_kv,
// attention.key_length, attention.value_length, attention.layer_norm_rms_epsilon, rope.freq_base,
// rope.dimension_count, vocab_size, rope.scaling.type/factor (linear) or the rope_freqs tensor
// (llama3). For "llama", the q and k rows are permuted per head from Hugging Face's rotate-half
// layout to the interleaved pairs llama.cpp rotates (w.reshape(heads, 2, head_dim / 2, in)
// .swapaxes(1, 2), heads = the key/value heads for k); qwen2 keeps Hugging Face's layout.
// Weight matrices are stored as `dtype`; norms, biases and rope factors as F32.
//
//   zeroshard::models::export_gguf("Llama-3.2-1B", "model.gguf", {GgufDtype::kQ8_0});
//
// Errors: the checkpoint's (hf_checkpoint.h); the tokenizer's (gguf_vocabulary.h); UsageError for
// a vocabulary whose size differs from the model's or a Q8_0 matrix whose rows are not a multiple
// of 32; IoError for the output file.

#include <optional>
#include <string>

#include "zeroshard/formats/gguf_vocab.h"
#include "zeroshard/formats/gguf_writer.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/models/llama_config.h"

namespace zeroshard::models {

enum class GgufDtype { kF32, kF16, kQ8_0 };
// "f32", "f16", "q8_0"; UsageError naming the allowed values otherwise.
GgufDtype gguf_dtype_from_string(const std::string& s);

struct GgufExportOptions {
  GgufDtype dtype = GgufDtype::kF32;
  // The tokenizer to embed. `vocabulary` when set; else `tokenizer` (a directory or file,
  // gguf_vocabulary.h) when set; else the Hugging Face directory's own tokenizer.json or
  // tokenizer.model when it has one; else gguf::byte_level_vocabulary(vocab_size) with the
  // config's bos/eos ids (GgufExportReport::tokenizer is then empty).
  std::optional<gguf::Vocabulary> vocabulary;
  std::string tokenizer;
  std::string name;  // general.name (default: the directory's name)
  LlamaConfigOptions config;
};

struct GgufExportReport {
  int64_t tensors = 0;
  int64_t bytes = 0;
  std::string architecture;
  std::string tokenizer;  // where the embedded tokenizer was read; empty for the byte-level vocabulary
};

GgufExportReport export_gguf(const std::string& hf_dir, const std::string& out, const GgufExportOptions& options = {});
// The same from any source of the model's tensors under Hugging Face's names, checked against `c`
// as check_hf_checkpoint (hf_checkpoint.h) does: a TensorDirectory, or a checkpoint's tensors
// with LoRA merged (zeroshard/checkpoint/checkpoint_tensors.h). general.name defaults to the
// source's file name.
GgufExportReport export_gguf(const LlamaConfig& c, TensorFile& weights, const std::string& out,
                             const GgufExportOptions& options);
// A zeroshard training checkpoint of a Llama-family model (llama_checkpoint.h), its LoRA adapters
// merged into their weights, read one tensor at a time (host memory near the largest tensor).
// general.name defaults to the checkpoint root's directory name.
GgufExportReport export_gguf_from_checkpoint(const std::string& ckpt, const std::string& out,
                                             const GgufExportOptions& options = {});

// Rows of a q or k projection (weight [heads * head_dim, in] or bias [heads * head_dim]) from Hugging
// Face's rotate-half layout to llama.cpp's interleaved one.
at::Tensor permute_for_interleaved_rope(const at::Tensor& w, int64_t heads);
// llama.cpp's rope_freqs for rope_scaling llama3: the divisor of each inverse frequency, fp32 [head_dim / 2].
at::Tensor llama3_rope_factors(const LlamaConfig& c);

}  // namespace zeroshard::models
