// SPDX-License-Identifier: Apache-2.0
#pragma once
// A Hugging Face model directory's weights as one TensorFile: model.safetensors, or sharded
// model-0000k-of-0000n.safetensors files listed by model.safetensors.index.json ({"weight_map":
// {tensor: file}}), or pytorch_model.bin (with pytorch_model.bin.index.json when sharded), looked
// for in that order. Each tensor is read, byte range by byte range, from the file that holds it,
// so a rank reads only its own shards' bytes across all files.
//
//   auto dir = zeroshard::TensorDirectory::open("Llama-3.2-1B");
//   dir->file_of("model.norm.weight");    // "model-00002-of-00002.safetensors"
//   dir->read("model.norm.weight", 0, n, dst);
//
// Errors (IoError, naming the directory and the file): no weights file, an index that is not
// JSON or has no weight_map, an index naming a shard file that does not exist, a tensor the index
// maps to a file that does not hold it, a shard holding a tensor the index does not map (or maps
// to another file), a tensor in two files; and whatever the file readers report (a truncated
// shard names the shard and the tensor). Thread-safety: one thread at a time.

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/formats/tensor_file.h"

namespace zeroshard {

class TensorDirectory final : public TensorFile {
 public:
  // `io`: what every file is read through (open_tensor_file).
  static std::unique_ptr<TensorDirectory> open(const std::string& dir, const std::shared_ptr<IoEngine>& io = nullptr);
  ~TensorDirectory() override;

  const std::string& path() const override { return dir_; }
  const char* format() const override;  // the shards' format ("safetensors" or "torch")
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  void read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) override;
  std::map<std::string, std::string> aliases() const override;

  // The file (a name inside the directory) that holds tensor `name`; UsageError for an unknown one.
  const std::string& file_of(const std::string& name) const;
  // The weight files, in index order ("model.safetensors" when there is no index).
  const std::vector<std::string>& files() const { return names_; }
  // The index read ("" when there is none).
  const std::string& index() const { return index_; }

 private:
  explicit TensorDirectory(std::string dir) : dir_(std::move(dir)) {}
  void open_files(const std::vector<std::string>& names, const std::shared_ptr<IoEngine>& io);
  void check_against_index(const std::vector<std::pair<std::string, std::string>>& weight_map);

  std::string dir_, index_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> file_index_;  // tensor -> files_ index
};

// A tensor file, or a model directory (TensorDirectory) when `path` is a directory.
std::unique_ptr<TensorFile> open_tensor_path(const std::string& path, std::shared_ptr<IoEngine> io = nullptr);

}  // namespace zeroshard
