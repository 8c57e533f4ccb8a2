// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tensor files: model weights by tensor name, read lazily, byte range by byte range, so a rank of a
// sharded job reads only the parts of the tensors that overlap its shards. Three formats:
//   torch        Python's torch.save(model.state_dict(), path): a zip archive holding a pickle
//                (data.pkl) of the state dict and one uncompressed entry per storage (data/<key>);
//   torchscript  a TorchScript/LibTorch archive (torch.jit.save, torch::save of a module,
//                zeroshard-ckpt consolidate): the same zip layout, with a pickled module whose
//                parameters and buffers are named by their dotted attribute paths;
//   safetensors  8-byte little-endian header length, a JSON header {name: {dtype, shape,
//                data_offsets}} with an optional "__metadata__" object, then raw little-endian data.
// open_tensor_file() tells them apart by their first bytes.
//
// torch and torchscript archives: tensor names are the dotted paths through dict keys (strings,
// integers), list/tuple indices and module attributes (e.g. a checkpoint's "model.h.0.attn.qkv.weight"
// or "opt.state.0.exp_avg"; a module's "h.0.attn.qkv.weight"); values that are not tensors are
// skipped. TorchScript tensor constants (code's CONSTANTS.c<i>) are "CONSTANTS.c<i>". Refused with an
// IoError naming the file (and the tensor): big-endian archives, storages the zip compresses,
// tensor kinds other than dense (quantized, sparse, ...), storage types other than those below,
// pickle opcodes outside what torch writes, and storage records shorter than a tensor needs.
//
//   auto f = zeroshard::open_tensor_file("model.safetensors");
//   for (const auto& t : f->tensors()) ...                   // names, dtypes, shapes
//   at::Tensor part = at::empty({n}, at::kFloat);
//   f->read("h.0.attn.qkv.weight", begin, n, part);          // elements [begin, begin + n)
//
// Errors name the file (and the tensor where one is involved): IoError when the file cannot be
// read or is truncated or malformed (a tensor whose bytes lie beyond the end of the file names the
// tensor and both sizes), UsageError for an unknown tensor name, a range outside the tensor, or a
// dtype conversion that is not supported. Thread-safety: a TensorFile is used from one thread.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

class IoEngine;

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

class TensorFile {
 public:
  virtual ~TensorFile() = default;

  virtual const std::string& path() const = 0;
  virtual const char* format() const = 0;  // "torch", "torchscript", "safetensors"
  // Every tensor, in file order, under its stored name (a state dict's keys, a module's dotted
  // attribute paths).
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // nullptr when there is no tensor of that name.
  const TensorInfo* find(const std::string& name) const;

  // Elements [begin, begin + count) of tensor `name`, taken in row-major order of its shape, into
  // `dst` (a contiguous CPU tensor of `count` elements). dst's dtype may differ from the stored one
  // among float32, bfloat16, float16 and float64 (converted as Tensor::to does); other dtypes must
  // match. Reads only the bytes of that range (a non-contiguous stored view: the span its elements
  // cover).
  virtual void read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) = 0;

  // Tied tensors: each name whose data is another stored tensor's (same storage, offset, shape and
  // strides), mapped to the first such name in file order. torch files tell from their storages;
  // safetensors files written by zeroshard list them in the "__metadata__" entry "zeroshard.aliases".
  virtual std::map<std::string, std::string> aliases() const { return {}; }
  // safetensors: the "__metadata__" strings; others: empty.
  virtual std::map<std::string, std::string> metadata() const { return {}; }

  // Payload bytes read by read() so far (not the header or index).
  int64_t bytes_read() const { return bytes_read_; }

 protected:
  int64_t bytes_read_ = 0;
};

// Opens `path`, detecting its format. IoError naming the file when it does not exist, cannot be
// read, or is none of the three formats (naming what its first bytes look like).
// Every read of the file, its header and index included, goes through `io` (null: an engine shared
// by the process), the interface of the offload and checkpoint I/O: a FaultInjectingIo given here
// makes a read fail as a failing disk would, and the error names the file and what was read.
std::unique_ptr<TensorFile> open_tensor_file(const std::string& path, std::shared_ptr<IoEngine> io = nullptr);

// The safetensors reader and the torch/torchscript zip reader, for callers that know the format.
std::unique_ptr<TensorFile> open_safetensors_file(const std::string& path, std::shared_ptr<IoEngine> io = nullptr);
std::unique_ptr<TensorFile> open_torch_zip_file(const std::string& path, std::shared_ptr<IoEngine> io = nullptr);

// Writes a safetensors file tensor by tensor, so the whole model never has to be in memory: the
// header (every name, dtype, shape and offset) is written first from the declared list, then each
// tensor's bytes at its offset, in any order. The file is written as <path>.tmp and renamed to
// <path> by finish(), so a failed export never leaves a file that looks complete.
class SafetensorsWriter {
 public:
  // `tensors`: every tensor the file will hold (names unique). `metadata`: "__metadata__" strings.
  // IoError naming the file when it cannot be created.
  SafetensorsWriter(std::string path, std::vector<TensorInfo> tensors,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // an unfinished file is removed
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The data of declared tensor `name`: a CPU tensor of its dtype and shape (made contiguous).
  // UsageError for an undeclared name, a second write, a dtype/shape mismatch, or a write after
  // finish().
  void write(const std::string& name, const at::Tensor& t);
  // Checks every declared tensor was written, syncs, renames into place. IoError on failure.
  void finish();
  int64_t bytes_written() const { return bytes_written_; }

 private:
  struct Entry {
    TensorInfo info;
    int64_t offset = 0;
    int64_t bytes = 0;
    bool written = false;
  };
  std::string path_, tmp_;
  int fd_ = -1;
  int64_t data_start_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  int64_t bytes_written_ = 0;
  bool finished_ = false;
};

// safetensors dtype names ("F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL").
const char* safetensors_dtype(c10::ScalarType t);

}  // namespace zeroshard
