// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a torch pickle (pickle.h) means: the tensors reachable from its root value, named by their
// dotted paths, each pointing at the storage record that holds its bytes.
//
// A tensor is a call torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, ...)
// (or _rebuild_tensor) whose storage is the persistent id ('storage', torch.<Type>Storage, key,
// location, numel); torch.save and the TorchScript pickler (Python and LibTorch) write the same
// tuple. _rebuild_parameter(tensor, ...) is the tensor. Names: dict keys (strings or integers),
// list and tuple indices, and the attributes an object's BUILD state holds (a TorchScript module's
// parameters, buffers and submodules), joined with '.'. Other objects' call arguments are skipped,
// as are values that hold no tensor.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pickle.h"

namespace zeroshard::detail {

struct PickledTensor {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::string record;          // the storage's record, relative to the archive folder: "data/0"
  int64_t storage_offset = 0;  // in elements
  std::vector<int64_t> shape, strides;
};

// The tensors under `root`, in pickle order; `prefix` starts their names (empty: none). Storage
// keys become records "<record_dir>/<key>". IoError naming `where` for a tensor kind zeroshard does
// not read (quantized, sparse, ...), an unknown storage type, or a malformed rebuild call.
std::vector<PickledTensor> pickled_tensors(const PickleRef& root, const std::string& prefix,
                                           const std::string& record_dir, const std::string& where);

// The storage dtype a "torch.<Type>Storage" global names; false when there is none.
bool storage_dtype(const std::string& global, c10::ScalarType& dtype);

}  // namespace zeroshard::detail
