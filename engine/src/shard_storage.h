// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a flat parameter's fp32 shard lives between uses, and how a gather reads it. One small
// interface, three modes (FlatParam picks one when it is built or attached to a store):
//   ResidentShard  an fp32 tensor in working memory (the default; the parameters may alias it)
//   StoredShard    in a ShardStore (offload.params = CPU / NVME), resident only while used; with a
//                  param_dtype copy kept resident (offload.keep_param_dtype_shard) gathers read the
//                  copy and never the store
//   EncodedShard   encoded by a ShardCodec (NF4): frozen, resident in its encoded form
// values() brings the values in and counts them as modified (release() writes or encodes them
// back); for_read() brings them in unmodified; for_overwrite() hands a tensor whose old values are
// not needed. release() drops what is resident (a failed write keeps it resident and modified).
// Not thread-safe: the training thread drives it.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/engine/unit_hook.h"
#include "zeroshard/store/store_options.h"

namespace zeroshard {

class ShardStore;

namespace detail {

// What every mode needs to know about its flat parameter.
struct ShardShape {
  std::string name;  // the flat parameter's, for messages
  int64_t shard_numel = 0;
  c10::Device device{c10::kCPU};
  c10::ScalarType param_dtype = c10::kFloat;
  MemoryStats* mem = nullptr;
};

// A gather of the shard into the full buffer (param_dtype, padded) over the shard group.
struct GatherInto {
  at::Tensor full;
  Communicator* group = nullptr;
  std::string tag;
  int64_t* elements = nullptr;  // elements gathered are added here
  int64_t* bytes = nullptr;     // bytes the all-gather delivers (what travels) are added here
  // > 0: the values travel int8-quantized in blocks of this many elements (comm/quantize.h) and
  // are decoded into `full` on every rank alike; 0: exactly, in full's dtype.
  int64_t quant_block = 0;
  // Buffers a quantized gather keeps until the full buffer is freed (on a GPU the decoding is
  // queued on the stream that waited), counted as comm buffers until then.
  std::vector<at::Tensor>* keep = nullptr;
};

class ShardStorage {
 public:
  virtual ~ShardStorage() = default;
  virtual at::Tensor& values() = 0;
  virtual const at::Tensor& for_read() = 0;
  virtual at::Tensor& for_overwrite() = 0;
  virtual void mark_modified() = 0;
  // With `retired`, a dropped tensor goes there (for a caller whose side stream may still read it).
  virtual void release(std::vector<at::Tensor>* retired) = 0;
  // release(nullptr), except that a stored shard's write goes behind (ShardStore::save_async: the
  // caller goes on while it lands; a failure is reported by the store's flush() or commit(), the
  // values held by the store meanwhile). For the optimizer step's write-back.
  virtual void release_behind() { release(nullptr); }
  virtual void prefetch() {}
  virtual bool resident() const = 0;
  virtual int64_t bytes_between_uses() const = 0;  // what this rank keeps for the shard
  // Starts the gather into `g.full` (its storage allocated); null when there is nothing to wait for.
  virtual std::shared_ptr<Work> gather(const GatherInto& g) = 0;
  virtual void gather_freed() {}  // the full buffer was freed: drop what the gather kept
  // Reads from the store what gather() will read, so that a failed read surfaces before the
  // collective (the engine agrees on it across ranks first). Nothing for a resident shard.
  virtual void load_for_gather() {}
  virtual bool stored() const { return false; }
  virtual bool has_param_dtype_copy() const { return false; }
  virtual const ShardCodec* codec() const { return nullptr; }
  virtual std::string file() const { return {}; }
  virtual void rename(const std::string& name) {}
  // A step over the store was abandoned (ShardStore::abandon): drops what is resident without
  // writing it; the store's values are the shard's again. Never throws.
  virtual void abandon() noexcept {}
};

// The fp32 values `shard` gathered into g.full: the cast copy when one rank holds everything, else
// an all-gather (low-precision compute: the shard cast into this rank's slice, gathered in place;
// g.quant_block: int8-quantized, gather_quantized).
std::shared_ptr<Work> gather_fp32(const GatherInto& g, const at::Tensor& shard, const ShardShape& shape);
// `values` (this rank's shard, any floating dtype) int8-quantized in blocks of g.quant_block,
// the encoded shards all-gathered, and every rank's part decoded into g.full (this rank's too, so
// that every rank computes with the same values). Group size > 1.
std::shared_ptr<Work> gather_quantized(const GatherInto& g, const at::Tensor& values, const ShardShape& shape);

// `values`: the fp32 shard (contiguous, [shard_numel]); accounted as sharded parameters.
std::unique_ptr<ShardStorage> resident_shard(const ShardShape& shape, at::Tensor values);
// Moves `values` into a new slot of `store` (which must outlive the result). `keep_param_dtype_copy`:
// the shard cast to param_dtype stays resident, kept equal to the master whenever it changes.
std::unique_ptr<ShardStorage> stored_shard(const ShardShape& shape, at::Tensor values, ShardStore* store,
                                           bool keep_param_dtype_copy);
// The parameter store's options for shards computed on `device`: two generations (the optimizer's
// master held once, in the store: OffloadedOptimizer) only on a CPU run; a GPU run's optimizer
// keeps its master in its own records, so one generation.
StoreOptions param_store_options(StoreOptions options, c10::Device device);
// Encodes `values` with `codec` (UsageError naming the unit for a value it cannot store).
std::unique_ptr<ShardStorage> encoded_shard(const ShardShape& shape, at::Tensor values,
                                            std::shared_ptr<const ShardCodec> codec);

}  // namespace detail
}  // namespace zeroshard
