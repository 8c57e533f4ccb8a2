// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a trainable flat parameter's fp32 gradient shard lives from its reduction to the optimizer
// step. Two modes behind one interface:
//   ResidentGrad  a tensor in working memory (or none)
//   StoredGrad    in a ShardStore (offload.grads = CPU / NVME): each reduction's result is added in
//                 and stored at once (written behind the backward); shard() holds a placeholder on
//                 the meta device of the shard's size, a new one whenever the stored values change
//                 (an interrupted optimizer step tells gradients apart by it); scale() on a stored
//                 gradient is recorded and applied when it is next loaded (clipping and unscaling
//                 write nothing); the squared norm of what it writes is kept, so clipping does not
//                 read it back
// Not thread-safe: the training thread drives it.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

class ShardStore;

namespace detail {

// A factor a gradient is multiplied by: a one-element tensor (kept on its device), or a number.
struct GradScale {
  at::Tensor tensor;
  double value = 1;
};

class GradStorage {
 public:
  virtual ~GradStorage() = default;
  // The gradient shard: its values, a placeholder on the meta device (stored, not resident), or
  // undefined (no gradient since the last drop()).
  virtual at::Tensor& shard() = 0;
  // The values (a stored one loaded, recorded factors applied); undefined when there is none.
  // IoError naming file and offset when the stored gradient cannot be read or is corrupted.
  virtual const at::Tensor& for_read() = 0;
  virtual void prefetch() {}
  // Adds a reduction's fp32 result (the first one becomes the gradient).
  virtual void add(at::Tensor reduced) = 0;
  // Stored: writes a resident gradient that changed, then drops it (`write_behind`: the store writes
  // it while the caller goes on; its flush() reports a failure). A failed write keeps it resident.
  virtual void release(bool write_behind) {}
  virtual void scale(GradScale s) = 0;  // in place when resident, else recorded
  virtual void drop() = 0;              // zero_grad with set_to_none
  // The squared L2 norm of what for_read() would return (double, one element, on the gradient's
  // device), when it is known without reading the values: a stored gradient's, computed as it was
  // written (the kernel clipping uses, so the same bits) while no factor has been recorded since.
  // Null otherwise (resident, scaled since, none).
  virtual const at::Tensor* known_squared_norm() const { return nullptr; }
  virtual bool stored() const { return false; }
  virtual std::string file() const { return {}; }
};

std::unique_ptr<GradStorage> resident_grad(int64_t shard_numel, MemoryStats* mem);
// A new slot of `store` (which must outlive the result) named `unit`.
std::unique_ptr<GradStorage> stored_grad(int64_t shard_numel, MemoryStats* mem, ShardStore* store,
                                         const std::string& unit, c10::Device device);

}  // namespace detail
}  // namespace zeroshard
