// SPDX-License-Identifier: Apache-2.0
#pragma once
// UnitHook: how adapters (LoRA, NF4 storage, ...) attach to the engine without the engine naming
// them. Hooks are listed in ShardingOptions::unit_hooks and called, in order:
//   on_unit_built  under a ShardedInit, for each Unit as it is constructed, before its parameters
//                  are sharded (an adapter adds its parameters, freezes the base);
//   on_wrap        when a ShardingEngine wraps the finished model, before it finds the units;
//   codec_for      for each frozen parameter that no other name shares, when its unit's flat
//                  parameters are built: a codec stores it compressed (ShardCodec), null keeps fp32.
// Hooks run on the training thread; they must make the same decisions on every rank.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard {

// A compressed form of a frozen flat parameter's shard (e.g. NF4). Each parameter of such a flat
// parameter starts on a multiple of alignment() elements in the flat layout, and every rank's shard
// is a whole number of alignment() blocks, so encoded shards concatenate into the encoded whole.
class ShardCodec {
 public:
  virtual ~ShardCodec() = default;
  virtual const char* name() const = 0;  // "nf4": in unit names and descriptions
  virtual int64_t alignment() const = 0;
  // Bytes (uint8 elements) of the encoded form of `numel` elements, numel a multiple of alignment().
  virtual int64_t encoded_bytes(int64_t numel) const = 0;
  // Encodes fp32 `values` (contiguous) into a uint8 tensor of encoded_bytes(numel) on their device.
  // Throws UsageError naming `what` for a value it cannot store (e.g. not finite).
  virtual at::Tensor encode(const at::Tensor& values, const std::string& what) const = 0;
  // Decodes `encoded` into `out` (contiguous, any floating dtype, numel matching).
  virtual void decode(const at::Tensor& encoded, const at::Tensor& out) const = 0;
};

class UnitHook {
 public:
  virtual ~UnitHook() = default;
  // The unit's own modules (nested units left out), named relative to the unit ("" is the unit).
  using ModuleList = std::vector<std::pair<std::string, torch::nn::Module*>>;
  virtual void on_unit_built(const std::string& /*unit*/, const ModuleList& /*modules*/) const {}
  // `built_in_unit(m)`: module m belongs to a unit a ShardedInit sharded as it was built (its
  // parameters are final).
  virtual void on_wrap(torch::nn::Module& /*model*/,
                       const std::function<bool(const torch::nn::Module*)>& /*built_in_unit*/) const {}
  virtual std::shared_ptr<const ShardCodec> codec_for(const torch::nn::Module& /*owner*/,
                                                      const std::string& /*key*/) const {
    return nullptr;
  }
};

}  // namespace zeroshard
