// SPDX-License-Identifier: Apache-2.0
#pragma once
// FlatShard: one flat parameter of a ShardingEngine as checkpoints, pretrained loading and exports
// see it: the layout of its parameters and this rank's shard of the values.
//
// A unit's parameters (each counted once, even when tied) lie back to back in a flat buffer of
// numel() elements, padded with zeros to padded_numel(), a multiple of the shard group's size N;
// rank r of the group owns elements [r*S, (r+1)*S), S = shard_numel(), shard_begin() = r*S, as fp32
// master values. Trainable and frozen parameters of a unit are in separate flat parameters.
// shard() and shard_for_read() bring the values in wherever they live (a store on host or NVMe, an
// encoded form such as NF4) and release_shard() puts them back (writing or encoding values changed
// through shard()), so a caller walking every flat parameter keeps one resident at a time.
// Local to this rank, not collective; not thread-safe (the training thread).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard {

struct ParamSlot {
  std::string name;                  // qualified name in the model (first one, if tied)
  std::vector<std::string> aliases;  // further names of the same tensor (tied weights)
  at::Tensor param;                  // the module's parameter (a leaf variable)
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the flat layout
  int64_t numel = 0;
};

class FlatShard {
 public:
  virtual ~FlatShard() = default;
  virtual const std::string& name() const = 0;  // the unit's name, "(frozen)" / "(nf4)" for those
  virtual bool trainable() const = 0;
  virtual const std::vector<ParamSlot>& slots() const = 0;
  virtual int64_t numel() const = 0;
  virtual int64_t padded_numel() const = 0;
  virtual int64_t shard_numel() const = 0;
  virtual int64_t shard_begin() const = 0;
  // The fp32 shard [shard_numel()], counted as changed: release_shard() writes or encodes it back.
  virtual at::Tensor& shard() = 0;
  virtual const at::Tensor& shard_for_read() = 0;
  // Puts values brought in by shard() / shard_for_read() back where they live and drops them (no-op
  // when they stay in memory anyway). IoError naming file and offset when a write fails: the values
  // stay resident and changed, so nothing is lost and the next release retries.
  virtual void release_shard() = 0;
  // Says the values written through shard() replace the model's weights (pretrained weights loaded
  // between steps): the next engine.step() hands them to the optimizer as its new fp32 master, so
  // an optimizer that keeps its own copy (offloaded to the host or NVMe) does not undo the load.
  virtual void mark_values_replaced() = 0;
  // Gradient buffers or reductions still pending (a backward ran inside no_sync, or did not finish).
  virtual bool gradients_pending() const = 0;
  // Frees the gathered (unsharded) buffer, so the next use gathers values changed through shard().
  virtual void free_gathered() = 0;
};

}  // namespace zeroshard
