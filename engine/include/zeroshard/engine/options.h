// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardingOptions: how the ShardingEngine shards a model (strategy, prefetch, auto-wrap, mixed
// precision, offloaded shards, unit hooks), as plain values. zeroshard/config/resolve.h fills it
// from a run's config at the edge; a default-constructed ShardingOptions equals what it makes of
// the default config (tests/config/test_resolve.cpp holds this).

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/store/store_options.h"
#include "zeroshard/engine/plan.h"
#include "zeroshard/engine/unit_hook.h"

namespace zeroshard {

// How module buffers (BatchNorm running statistics) stay in step across ranks after wrap time
// (sync_module_states makes them rank 0's at wrap time). Each is one collective for all buffers.
enum class BufferSync {
  kAverage,    // AVERAGE: floating buffers averaged over all ranks after every step()
  kBroadcast,  // BROADCAST: rank 0's copied to every rank at the start of every engine.forward (DDP)
  kNone,       // NONE: each rank keeps its own (FSDP)
};
const char* to_string(BufferSync b);  // "AVERAGE", "BROADCAST", "NONE"

struct ShardingOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int hybrid_group_size = 0;  // HYBRID_SHARD: ranks per shard group; 0 = ranks of one node
  // hpZ (ZeRO++'s secondary partition; FULL_SHARD, HYBRID_SHARD): after a unit's forward each rank
  // keeps 1/hpz_group_size of the unit's gathered parameters (param_dtype, in memory) until the
  // unit's backward, whose gathers then run inside groups of hpz_group_size consecutive ranks of
  // the shard group (0: the ranks of the shard group on one node) instead of across it: with a
  // group per node, backward's parameter gathers never leave the node. 1: off. Values and
  // gradients are bitwise those without hpZ. Not with offloaded parameters (plan.h's
  // plan_secondary_groups says which sizes are allowed).
  int hpz_group_size = 1;
  bool forward_prefetch = true;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  int limit_all_gathers = 2;  // all-gathers in flight at once
  bool sync_module_states = true;
  BufferSync buffer_sync = BufferSync::kAverage;
  // > 0: parameter all-gathers travel int8-quantized, one fp32 scale per this many elements
  // (sharding.gather_quantization = INT8; zeroshard/comm/quantize.h): the gathered parameters every
  // rank computes with are the quantized ones, alike on every rank; the fp32 shards, gradients,
  // optimizer state and checkpoints stay exact. 0: gathered exactly in param_dtype.
  int64_t gather_quant_block = 0;
  // > 0: gradient reduce-scatters travel int8-quantized, one fp32 scale per this many elements
  // (sharding.reduce_quantization = INT8; Communicator::reduce_scatter_int8_into): the reduced
  // gradient shards carry the quantization error, summed in fp32; HYBRID_SHARD's all-reduce over
  // the replicas and NO_SHARD's stay exact. The MPI backend only. 0: reduced exactly in reduce_dtype.
  int64_t reduce_quant_block = 0;
  // Auto-wrap: which submodules become units in addition to declared Units. A module picked by
  // the policy must still be called through a Unit holder or engine.call_unit (see unit.h).
  AutoWrapPolicy auto_wrap_policy = AutoWrapPolicy::kNone;
  int64_t auto_wrap_min_params = 100000000;
  // MODULE_TYPE: the Module::name() values to wrap ("torch::nn::Linear" or "torch::nn::LinearImpl",
  // "GptBlock").
  std::vector<std::string> auto_wrap_module_types;
  // Mixed precision: parameters are gathered and computed in param_dtype, gradients reduced in
  // reduce_dtype; the shards, gradient shards and optimizer state stay fp32. Buffers are cast to
  // buffer_dtype at wrap time, floating inputs of every unit to param_dtype (cast_forward_inputs),
  // and the floating tensors engine.forward returns to output_dtype.
  c10::ScalarType param_dtype = c10::kFloat;
  c10::ScalarType reduce_dtype = c10::kFloat;
  c10::ScalarType buffer_dtype = c10::kFloat;
  c10::ScalarType output_dtype = c10::kFloat;
  bool cast_forward_inputs = true;
  // Alternative to param_dtype: keep fp32 parameters and run engine.forward under LibTorch autocast
  // in autocast_dtype (CPU: bf16; CUDA: fp16/bf16). param_dtype must then stay fp32. Activation
  // checkpoints re-apply the autocast state of their forward run to the recomputation.
  bool autocast = false;
  c10::ScalarType autocast_dtype = c10::kBFloat16;
  // Adapters attached at unit-build time (unit_hook.h): LoRA, NF4 storage of frozen weights.
  std::vector<std::shared_ptr<const UnitHook>> unit_hooks;
  // Where the parameter shards live between uses.
  StoreOptions offload_params;
  // With offload_params CPU / NVME and a param_dtype other than fp32,
  // each offloaded shard also stays resident in param_dtype (2 bytes per element for bf16/fp16, on
  // the compute device): the gathers read that copy, never the store, and the fp32 master stays in
  // the store, where the optimizer step updates it (ZeRO-Offload's layout: the device holds the
  // low-precision shard only). Gathered values are the same (the copy is the fp32 shard cast, made
  // again whenever the shard changes). Frozen and trainable shards alike; NF4 shards are never
  // offloaded. The engine refuses it (UsageError) without offloaded shards or with fp32 compute.
  bool keep_param_dtype_shard = false;
  // Where the fp32 gradient shards live from their reduction to the optimizer step
  // (the same fields; files under <nvme_path>/zeroshard-grads-rank<R>/). kCpu / kNvme need the
  // optimizer offloaded (its step brings each gradient in with its shard).
  StoreOptions offload_grads;
};

}  // namespace zeroshard
