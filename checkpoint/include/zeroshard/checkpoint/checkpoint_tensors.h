// SPDX-License-Identifier: Apache-2.0
#pragma once
// A zeroshard checkpoint's parameters as a TensorFile (zeroshard/formats/tensor_file.h): whole
// tensors by name, each put together from the shard sections of the rank files, which are read
// front to back in pieces with every section's CRC-32C checked, so host memory stays near one
// tensor and nothing but the checkpoint directory is needed (no engine, no MPI). Exports (Hugging
// Face directories, PEFT adapters, GGUF) read it, and load_pretrained loads it into a model.
//
//   zeroshard::ckpt::CheckpointTensors c("ckpt", {/*merge_lora=*/true});
//   for (const auto& t : c.tensors()) write(t.name, c.read_whole(t.name));
//   c.check_rest();   // the bytes no read touched: every section's checksum has been checked
//
// Names are the model's qualified parameter names; tied parameters are one tensor under their
// first name (aliases() maps the others to it). Values are fp32 (the master shards). merge_lora:
// every adapted layer's "X.weight" reads as weight + lora_B lora_A * alpha / rank (fp32; alpha and
// rank from the checkpoint's model description) and the adapters are left out. Reading the
// tensors in the order tensors() lists them reads every byte once; reading back within a flat
// parameter re-reads from the start of the section that holds the tensor. Buffers come after the
// parameters, in their saved dtype, read whole from rank 0's file.
// Errors: CheckpointError naming the file and section (damaged, truncated, not a checkpoint), or
// the checkpoint when merging needs a LoRA description it lacks; UsageError for an unknown name or
// a range outside a tensor (as every TensorFile). One thread at a time.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/formats/tensor_file.h"

namespace zeroshard::ckpt {

// One parameter as the checkpoint saved it.
struct SavedParam {
  std::string name;
  std::vector<std::string> aliases;  // tied names of the same tensor
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::string unit;     // the unit that owned it (its flat parameters are read together)
  bool trainable = false;
  size_t flat = 0;      // index of its flat parameter in the manifest
  int64_t offset = 0;   // in that flat parameter, in elements
};

class CheckpointTensors final : public TensorFile {
 public:
  struct Options {
    bool merge_lora = false;
  };
  // `path`: a step directory or a checkpoint root (its latest). CheckpointError when it is not a
  // checkpoint, a rank file is missing, or (merge_lora) the checkpoint has adapters but no LoRA
  // description.
  explicit CheckpointTensors(const std::string& path, Options options);
  explicit CheckpointTensors(const std::string& path) : CheckpointTensors(path, Options{}) {}
  ~CheckpointTensors() override;

  const std::string& path() const override { return dir_; }
  const char* format() const override { return "zeroshard checkpoint"; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  void read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) override;
  std::map<std::string, std::string> aliases() const override;

  // Tensor `name` whole (fp32 for parameters, merged where asked; the saved dtype for buffers).
  at::Tensor read_whole(const std::string& name);
  // Reads what no read has touched yet in the flat parameters holding `names` (all when empty), so
  // that every one of their sections' checksums has been checked.
  void check_rest(const std::vector<std::string>& names = {});

  // Every saved parameter, adapters included, in the manifest's order.
  const std::vector<SavedParam>& params() const { return params_; }
  const SavedParam& param(const std::string& name) const;  // UsageError for an unknown name
  // The layers carrying LoRA adapters ("X" for "X.lora_A" / "X.lora_B"), in order.
  const std::vector<std::string>& adapted_layers() const { return adapted_; }
  // The run's model description: the Hugging Face config.json text ("" when not recorded) and the
  // LoRA options (unset when not recorded).
  const std::string& hf_config() const { return hf_config_; }
  const std::optional<lora::Options>& lora() const { return lora_; }
  int64_t step() const { return step_; }
  // The LoRA scale alpha / rank; CheckpointError naming the checkpoint when it has adapters but
  // no LoRA description, or the description's rank differs from the adapters'.
  double lora_scale() const;

 private:
  bool merged_weight(const std::string& name) const;  // merge_lora and an adapted layer's "X.weight"
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_, hf_config_;
  std::optional<lora::Options> lora_;
  int64_t step_ = 0;
  bool merge_ = false;
  std::vector<SavedParam> params_;
  std::vector<TensorInfo> infos_;
  std::vector<std::string> adapted_;
  std::map<std::string, size_t> by_name_;  // param name (and alias) -> params_ index
};

}  // namespace zeroshard::ckpt
