// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pretrained weights into a sharded model: each rank reads, from the file, only the elements of
// each tensor that fall into its own shards (and the buffers, which every rank keeps whole), so no
// rank ever holds the whole model. Formats: whatever open_tensor_file reads (zeroshard/formats/
// tensor_file.h): Python's torch.save(model.state_dict()), safetensors, TorchScript/LibTorch
// archives such as zeroshard-ckpt consolidate writes; or a Hugging Face model directory
// (zeroshard/formats/tensor_dir.h: the weights of several files read as one).
//
//   zeroshard::ShardedInit init(session, options);      // the model is sharded as it is built
//   MyModel model(...);
//   zeroshard::ShardingEngine engine(init, model.ptr());
//   zeroshard::load_pretrained(engine, "model.safetensors");   // collective
//
// Names: a file tensor's name goes through strip_prefix, add_prefix, then rename (exact pairs)
// or else the first of rename_patterns that matches it, and must then equal a model parameter's or buffer's qualified name (named_parameters(),
// named_buffers()). Tied parameters (one tensor under several names, e.g. a token embedding and
// the output projection) are loaded from whichever of their names the file has; a file that holds
// several of those names must hold them as one tensor (tied in the file too) in strict mode.
// Values are converted to the model's dtypes (bf16/fp16/fp64 files into fp32 master shards).
//
// strict (the default): every parameter and buffer of the model must be in the file, every tensor
// of the file in the model, with equal shapes; otherwise one CheckpointError names the file and
// lists what is missing, unexpected and of another shape (the first few of each, with both
// shapes), and nothing is loaded. Not strict: what matches is loaded, the rest is reported
// (PretrainedReport) and logged. A truncated or corrupt file names the file and the tensor.
// Collective over all ranks of the engine: a failure on any rank fails the call on every rank.
// Call it between optimizer steps (no gradients pending); optimizer state is left as it is.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

class ShardingEngine;
class TensorFile;

// A rename of file tensor names by pattern (PretrainedOptions::rename_patterns), for names that
// follow a scheme ("transformer.h.7.attn.c_attn.weight" -> "model.layers.7.self_attn.qkv.weight"):
//   kTemplate  `from` and `to` with placeholders {NAME}, each standing for one dotted component
//              of the name (one or more characters other than '.'); every placeholder of `to`
//              must be in `from`, once: "transformer.h.{N}.attn.c_attn.weight" ->
//              "model.layers.{N}.self_attn.qkv.weight".
//   kRegex     `from` an ECMAScript regular expression matched against the whole name, `to` its
//              replacement, where $1 ... $9 are its groups: base_model\.model\.(.+)\.lora_([AB])\.weight
//              -> $1.lora_$2.
// A malformed pattern is a ConfigError naming it ("from=to") and what is wrong.
struct RenamePattern {
  enum class Kind { kTemplate, kRegex };
  Kind kind = Kind::kTemplate;
  std::string from, to;
};

struct PretrainedOptions {
  bool strict = true;
  std::string strip_prefix;  // removed from the start of file names (when present)
  std::string add_prefix;    // then added
  std::map<std::string, std::string> rename;  // then: file name -> model name
  // Then, for a name no exact pair renamed, the first pattern that matches it (none: unchanged).
  // Two file tensors that end up under one model name are an error naming both (and the pattern).
  std::vector<RenamePattern> rename_patterns;
  // Model parameters (globs over qualified names) that a strict load does not require from the
  // file: they keep their initial values, e.g. LoRA adapters ("*lora_A", "*lora_B") over
  // pretrained base weights. Reported as missing all the same.
  std::vector<std::string> not_required;
};

struct PretrainedReport {
  std::string path;
  std::string format;                    // "torch", "torchscript", "safetensors"
  int64_t tensors_loaded = 0;            // model parameters (tied ones once) and buffers
  int64_t elements_read = 0;             // by this rank
  int64_t bytes_read = 0;                // by this rank, of tensor data
  std::vector<std::string> missing;      // model names not in the file (not strict)
  std::vector<std::string> unexpected;   // file names (as mapped) not in the model (not strict)
  std::vector<std::string> mismatched;   // "name: file [..], model [..]" (not strict)
  std::string summary() const;           // one line for logs
};

PretrainedReport load_pretrained(ShardingEngine& engine, const std::string& path,
                                 const PretrainedOptions& options = {});

// The same from any TensorFile (e.g. a checkpoint's tensors, zeroshard/checkpoint/checkpoint_tensors.h):
// `open` runs on every rank inside the collective step, so a rank that cannot open it fails the
// call on every rank.
using TensorFileOpener = std::function<std::unique_ptr<TensorFile>()>;
PretrainedReport load_pretrained(ShardingEngine& engine, const TensorFileOpener& open,
                                 const PretrainedOptions& options = {});

}  // namespace zeroshard
