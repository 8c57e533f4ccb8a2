// SPDX-License-Identifier: Apache-2.0
#pragma once
// Datasets for the DataLoader: random access to examples by index.
//
// Thread-safety: get() and size() are called concurrently from the loader's worker threads, so an
// implementation must be safe for concurrent const calls (the datasets here hold immutable
// tensors and only read them).

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "zeroshard/base/error.h"

namespace zeroshard {

// DataError (zeroshard/base/error.h): a worker's exception re-thrown on the training thread (the
// message names the batch and sample), or a malformed dataset file.

// One example: `data` and `target` of fixed shapes (the same for every index of a dataset), so
// the loader can stack them into a batch.
struct Example {
  at::Tensor data;
  at::Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The example at `index` in [0, size()). May throw; the loader reports which index failed.
  virtual Example get(int64_t index) const = 0;
};

}  // namespace zeroshard
