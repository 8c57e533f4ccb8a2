// SPDX-License-Identifier: Apache-2.0
#pragma once
// FlatParam: a unit's parameters flattened into one buffer and sharded across its shard group
// (the layout: flat_shard.h). While the unit computes, full() holds the gathered buffer in
// param_dtype and every module parameter is a view of it (Tensor::set_data at wrap time, once).
// Resharding frees the buffer's storage *in place* (the StorageImpl stays, its bytes go), so views
// autograd saved stay valid and see the data again when the next gather refills the same storage.
// With a shard group of one rank and fp32 compute the parameters are views of the shard itself
// (aliased: nothing is gathered or freed). Gradients of trainable parameters are accumulated into
// a flat gradient buffer (param_dtype) and reduced into the fp32 gradient shard.
// Where the shard and the gradient shard live between uses is a mode of their own (ShardStorage,
// GradStorage: resident, stored on host/NVMe, encoded), chosen at build or attach time; the code
// here does not branch on it. Not thread-safe: the engine drives it on the training thread.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grad_storage.h"
#include "shard_storage.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/engine/unit_hook.h"

namespace zeroshard {

class ShardStore;
class ShardingEngine;

class FlatParam final : public FlatShard {
 public:
  // `replicate` may be null (no replication across groups). `trainable` false: frozen parameters
  // (no gradients, no optimizer state). `mem` must outlive the FlatParam. param_dtype: the gathered
  // parameters' and their gradients' dtype; reduce_dtype: the dtype gradients are reduced in.
  // `offload_capable`: the shard will move to a store (attach_store). `codec`: the shard is kept
  // encoded (frozen only).
  FlatParam(std::string name, std::vector<ParamSlot> slots, bool trainable, std::shared_ptr<Communicator> shard_group,
            std::shared_ptr<Communicator> replicate, MemoryStats* mem, c10::ScalarType param_dtype = c10::kFloat,
            c10::ScalarType reduce_dtype = c10::kFloat, bool offload_capable = false,
            std::shared_ptr<const ShardCodec> codec = nullptr);
  ~FlatParam() override;
  FlatParam(const FlatParam&) = delete;
  FlatParam& operator=(const FlatParam&) = delete;

  // Takes the parameters' current values (rank 0's, broadcast over `sync_from` when given, so all
  // ranks start equal), keeps this rank's shard, and makes every parameter a view of the flat
  // buffer, resharded (unless aliased). Collective over `sync_from` when given. Each parameter's own
  // storage is released as soon as its part is in the shard, so a unit's bytes are never held twice.
  void init_from_params(Communicator* sync_from);
  // UsageError naming the parameter unless all are fp32 and on one device. Changes nothing.
  void check_params() const;
  // Names the unit and its parameters (the layout is unchanged): flat parameters built before the
  // model was complete (ShardedInit) are renamed once the model's paths are known.
  void rename(std::string name, const std::vector<std::pair<std::string, std::vector<std::string>>>& slot_names);

  // --- FlatShard ---
  const std::string& name() const override { return name_; }
  bool trainable() const override { return trainable_; }
  const std::vector<ParamSlot>& slots() const override { return slots_; }
  int64_t numel() const override { return numel_; }
  int64_t padded_numel() const override { return padded_; }
  int64_t shard_numel() const override { return shard_numel_; }
  int64_t shard_begin() const override { return static_cast<int64_t>(shard_group_->rank()) * shard_numel_; }
  at::Tensor& shard() override { return storage_->values(); }
  const at::Tensor& shard_for_read() override { return storage_->for_read(); }
  void release_shard() override { storage_->release(nullptr); }
  bool gradients_pending() const override { return has_grad_buffer() || reduce_pending(); }
  void free_gathered() override { free_full(); }
  void mark_values_replaced() override {
    values_replaced_ = true;
    drop_secondary();
  }

  // Set by mark_values_replaced until a step has handed the values to the optimizer.
  bool values_replaced() const { return values_replaced_; }
  void clear_values_replaced() { values_replaced_ = false; }

  bool aliased() const { return aliased_; }
  const ShardCodec* codec() const { return storage_ != nullptr ? storage_->codec() : codec_.get(); }
  int64_t shard_storage_bytes() const { return storage_->bytes_between_uses(); }
  Communicator& shard_group() const { return *shard_group_; }

  // --- where the shard lives ---
  // Moves the shard into `store` (a new slot) and drops it from memory: for a flat parameter built
  // offload_capable, after init_from_params. `store` must outlive this. keep_param_dtype_copy: see
  // shard_storage.h's StoredShard. A failed write keeps the shard resident (IoError).
  void attach_store(ShardStore* store, bool keep_param_dtype_copy = false);
  bool shard_offloaded() const { return storage_->stored(); }
  bool offload_capable() const { return offload_capable_; }
  bool shard_resident() const { return storage_->resident(); }
  bool has_param_dtype_copy() const { return storage_->has_param_dtype_copy(); }
  // A tensor of the shard's size the caller overwrites whole (nothing read), counted as changed.
  at::Tensor& shard_for_overwrite() { return storage_->for_overwrite(); }
  void mark_shard_modified() { storage_->mark_modified(); }
  void prefetch_shard() { storage_->prefetch(); }
  // Reads what the next gather reads from the store (see ShardStorage::load_for_gather).
  void load_for_gather() {
    if (!gathered()) storage_->load_for_gather();
  }
  // With `retired`, the dropped tensor goes there (a side stream may still read it).
  void release_shard(std::vector<at::Tensor>* retired) { storage_->release(retired); }
  // The optimizer step's write-back: a stored shard's write goes behind (shard_storage.h).
  void release_shard_behind() { storage_->release_behind(); }
  // The store's step was abandoned: what is resident goes unwritten (never throws).
  void abandon_shard() noexcept { storage_->abandon(); }
  c10::Device device() const { return device_; }
  std::string shard_file() const { return storage_->file(); }

  // --- the gradient shard ---
  // fp32 [S]; undefined when there is none; a placeholder on the meta device while stored.
  at::Tensor& grad_shard() { return grad_->shard(); }
  // Keeps this trainable flat parameter's gradient shard in `store` (a new slot) from now on.
  // Before any gradient exists; `store` must outlive this.
  void attach_grad_store(ShardStore* store);
  bool grad_offloaded() const { return grad_->stored(); }
  const at::Tensor& grad_for_read() { return grad_->for_read(); }
  void prefetch_grad() { grad_->prefetch(); }
  // The gradient's squared norm when known without reading it (grad_storage.h), else null.
  const at::Tensor* known_grad_squared_norm() const { return grad_->known_squared_norm(); }
  void release_grad(bool write_behind = false) { grad_->release(write_behind); }
  void scale_grad(const at::Tensor& factor) { grad_->scale({factor, 1}); }
  void scale_grad(double factor) { grad_->scale({at::Tensor(), factor}); }
  std::string grad_file() const { return grad_->file(); }
  void drop_grad_shard() { grad_->drop(); }

  // --- the gathered parameters ---
  bool gathered() const { return aliased_ || full_allocated_; }
  const at::Tensor& full() const { return full_; }
  // Allocates the full buffer's storage (from the current stream's pool) and starts the gather into
  // it; null when there is nothing to wait for (aliased, already gathered, or done in place).
  // Elements gathered go to `elements`, the bytes that travel to `bytes`.
  std::shared_ptr<Work> start_gather(const std::string& tag, int64_t* elements, int64_t* bytes = nullptr);
  // Gathers travel int8-quantized in blocks of `block` elements (0: exactly); the engine sets it
  // from ShardingOptions::gather_quant_block for flat parameters that are not stored encoded.
  void quantize_gathers(int64_t block) { gather_quant_block_ = block; }
  void quantize_reduces(int64_t block) { reduce_quant_block_ = block; }
  // Frees the full buffer's storage (no-op when aliased or already free).
  void free_full();

  // --- hpZ (ShardingOptions::hpz_group_size) ---
  // Backward's gathers may run inside `group`, a split of the shard group (set at build time).
  void use_secondary_group(std::shared_ptr<Communicator> group) { secondary_group_ = std::move(group); }
  // While gathered (after the forward, before resharding): keeps this rank's 1/L slice of the
  // gathered values (L: the secondary group's size; slice j for its rank j there), so that until
  // drop_secondary every start_gather gathers the L slices inside the secondary group, values
  // bitwise what this gather delivered. No-op without a secondary group, when aliased, not
  // gathered, or already kept. Every rank of the shard group must keep and drop alike (the
  // engine does both at points every rank passes), or the two kinds of gathers would mismatch.
  void keep_secondary();
  void drop_secondary() noexcept;
  bool has_secondary() const { return secondary_.defined(); }
  // The unsharded fp32 values (collective over the shard group): padded flat tensor.
  at::Tensor gather_values(const std::string& tag);

  // --- gradients ---
  // Allocates the flat gradient buffer (if absent; only the gaps between parameters and the padding
  // are zeroed). A parameter whose gradient is in the buffer already (no_sync accumulation) gets
  // .grad = its view, so autograd adds into it; the others an undefined .grad, so autograd hands
  // over its own tensor, which take_grad copies in.
  void prepare_grads();
  // After autograd accumulated parameter `slot`'s gradient (its AccumulateGrad node ran).
  void take_grad(size_t slot);
  bool has_grad_buffer() const { return grad_buffer_.defined(); }
  // Reducing a gradient buffer runs in up to three stages so that nothing blocks the training
  // thread longer than it must:
  //   start_reduce    the reduce-scatter (average) over the shard group, or with a one-rank shard
  //                   group the all-reduce over the replicas (NO_SHARD); collective.
  //   advance_reduce  waits for the reduce-scatter, frees the gradient buffer, and starts the
  //                   all-reduce of the shard over the replicas (HYBRID_SHARD) without waiting.
  //                   Returns true while a replica all-reduce is in flight.
  //   finish_reduce   waits for whatever is in flight and adds the result into the gradient shard.
  // Each stage runs the earlier ones that have not run. Elements communicated go to `elements`, the
  // bytes sent for them (quantized: encoded) to `bytes`.
  // With `retired`, gradient buffers are moved there instead of being freed (a caller that ran this
  // on a side stream keeps them until that stream is done with them).
  void start_reduce(const std::string& tag, int64_t* elements, int64_t* bytes);
  bool advance_reduce(const std::string& tag, int64_t* elements, int64_t* bytes,
                      std::vector<at::Tensor>* retired = nullptr);
  void finish_reduce(const std::string& tag, int64_t* elements, int64_t* bytes,
                     std::vector<at::Tensor>* retired = nullptr);
  bool reduce_pending() const { return pending_out_.defined(); }
  // After a failed backward: waits for the collectives in flight (issued on every rank alike), then
  // drops their results and the gradient buffer, leaving the gradient shard as it was. Never throws.
  void abandon_reduce() noexcept;

 private:
  detail::ShardShape shape() const;
  void alloc_full_storage();
  void point_params_at(const at::Tensor& flat);
  // Every trainable parameter's .grad becomes a placeholder on the meta device (see
  // drop_param_grads in flat_param.cpp): the engine keeps gradients in the flat shards.
  void drop_param_grads();
  void release_grad_buffer(std::vector<at::Tensor>* retired);
  void zero_missing_grads();  // the ranges of parameters that got no gradient in this buffer
  std::vector<std::pair<int64_t, int64_t>> gaps_between_slots() const;  // (start, length), padding last
  int64_t lp_bytes(int64_t elements) const;  // param_dtype
  int64_t rd_bytes(int64_t elements) const;  // reduce_dtype

  std::string name_;
  std::vector<ParamSlot> slots_;
  std::vector<uint8_t> grad_taken_;  // per slot: its gradient is in grad_buffer_
  std::vector<std::pair<int64_t, int64_t>> grad_gaps_;  // gaps_between_slots(), once
  bool trainable_;
  std::shared_ptr<Communicator> shard_group_;
  std::shared_ptr<Communicator> replicate_;
  MemoryStats* mem_;
  int64_t numel_ = 0;
  int64_t padded_ = 0;
  int64_t shard_numel_ = 0;
  bool aliased_ = false;
  bool offload_capable_ = false;
  bool values_replaced_ = false;
  c10::Device device_{c10::kCPU};
  c10::ScalarType param_dtype_;
  c10::ScalarType reduce_dtype_;
  std::shared_ptr<const ShardCodec> codec_;         // until the storage is made
  std::unique_ptr<detail::ShardStorage> storage_;   // made by init_from_params
  std::unique_ptr<detail::GradStorage> grad_;
  at::Tensor full_;         // [padded]: gathered values; storage freed while resharded
  bool full_allocated_ = false;
  int64_t gather_quant_block_ = 0;
  int64_t reduce_quant_block_ = 0;
  std::vector<at::Tensor> gather_staging_;  // a quantized gather's buffers, until free_full
  std::shared_ptr<Communicator> secondary_group_;  // hpZ; null without
  at::Tensor secondary_;    // [padded / L] in param_dtype: this rank's slice, between keep and drop
  at::Tensor grad_buffer_;  // [padded] or undefined
  at::Tensor pending_out_;  // the reduction's result in reduce_dtype: defined from start to finish
  int64_t staged_bytes_ = 0;  // of pending_out_, counted as comm buffers (0 when it is grad_buffer_)
  std::shared_ptr<Work> pending_rs_;
  std::shared_ptr<Work> pending_ar_;
};

namespace detail {
// Every flat parameter of `engine` as the engine's own type (for the engine's layers and tests).
std::vector<FlatParam*> flat_params(ShardingEngine& engine);
}  // namespace detail

}  // namespace zeroshard
