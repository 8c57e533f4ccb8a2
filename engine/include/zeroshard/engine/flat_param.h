#pragma once
// FlatParam: the parameters of one unit flattened into one buffer, sharded across a group.
//
// Layout: the unit's parameters (each counted once, even when tied) are laid out back to back in
// a flat buffer of `numel()` elements, padded with zeros to `padded_numel()`, a multiple of the
// shard group's size N. Rank r of the group owns elements [r*S, (r+1)*S), S = padded_numel()/N,
// as an fp32 master shard. While the unit computes, `full()` holds the gathered buffer and every
// module parameter is a view of it (Tensor::set_data at wrap time, once). Resharding frees the
// buffer's storage *in place* (the StorageImpl stays, its bytes go), so views saved by autograd
// stay valid and see the data again when the next gather refills the same storage.
// With a shard group of one rank and fp32 compute the parameters are views of the shard itself:
// nothing is gathered or freed (NO_SHARD, or any strategy at world size 1). With a lower-precision
// param_dtype, parameters and their gradients live in that dtype (the all-gather moves the shard
// cast to it, half the bytes for bf16/fp16) while the master shard and gradient shard stay fp32.
// Offloaded shard (attach_store, offload.params = CPU or NVME): the shard lives in a ShardStore
// between uses. shard() brings it back (and marks it modified), the gather brings it back
// read-only, release_shard() writes a modified shard back and drops it; prefetch_shard() starts
// reading it ahead. Such a flat parameter is never aliased (the gathered buffer is its own).
// With a resident param_dtype copy (offload.keep_param_dtype_shard) the gathers read the copy and
// the store holds the fp32 master, brought in only to change it (the optimizer step, loads).
// Offloaded gradient shard (attach_grad_store, offload.grads = CPU or NVME): each reduction's
// result goes to the store as soon as it is added in (a gradient accumulated over micro-batches is
// brought back, added to, and stored again), and grad_shard() holds a placeholder on the meta
// device of the shard's size (same identity until the gradient changes). grad_for_read() brings it
// back for a reader, release_grad() drops it again; scale_grad() multiplies in place when it is
// resident and otherwise records the factor, applied (in order, by the same kernel) when it is next
// loaded, so clipping and unscaling cost no write of the gradient.
// Encoded shard (a ShardCodec from a unit hook, e.g. NF4 for frozen Linear weights): the shard is
// kept encoded (packed_shard(), uint8), each parameter starting on a codec-alignment boundary so
// no block mixes two tensors. The all-gather moves the encoded shards and each rank's part is
// decoded into the full buffer, in param_dtype, when the gather is waited for. shard() and
// shard_for_read() hand out the decoded fp32 values; release_shard() encodes them again if
// shard() (or shard_for_overwrite()) handed them out, and drops them. Never trainable, never
// offloaded.
// Not thread-safe: driven by the engine on the training thread.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/engine/unit_hook.h"

namespace zeroshard {

class ShardStore;

struct ParamSlot {
  std::string name;                  // qualified name in the model (first one, if tied)
  std::vector<std::string> aliases;  // further names of the same tensor (tied weights)
  at::Tensor param;                  // the module's parameter (a leaf variable)
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the flat layout
  int64_t numel = 0;
};

class FlatParam {
 public:
  // `replicate` may be null (no replication across groups). `trainable` false: frozen parameters
  // (no gradients, no optimizer state). `mem` must outlive the FlatParam.
  // `param_dtype`: dtype of the gathered parameters (compute) and of their gradients;
  // `reduce_dtype`: dtype the gradients are reduced in. The shard and gradient shard stay fp32.
  FlatParam(std::string name, std::vector<ParamSlot> slots, bool trainable,
            std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate,
            MemoryStats* mem, c10::ScalarType param_dtype = c10::kFloat,
            c10::ScalarType reduce_dtype = c10::kFloat, bool offloaded_shard = false,
            std::shared_ptr<const ShardCodec> codec = nullptr);
  ~FlatParam();
  FlatParam(const FlatParam&) = delete;
  FlatParam& operator=(const FlatParam&) = delete;

  // Takes the parameters' current values (rank 0's, broadcast over `sync_from` when given, so all
  // ranks start equal), keeps this rank's shard, and makes every parameter a view of the flat
  // buffer. Afterwards the unit is resharded (the next forward gathers it), except when aliased
  // (the parameters are views of the shard). Collective over `sync_from` when it is given (one
  // broadcast per parameter). Each parameter's own storage is released as soon as its part is in
  // the shard, so building a unit never needs its bytes twice.
  void init_from_params(Communicator* sync_from);
  // UsageError naming the parameter unless all are fp32 and on one device. Changes nothing.
  void check_params() const;

  const std::string& name() const { return name_; }
  // Names the unit and its parameters (the layout is unchanged): for flat parameters built before
  // the model was complete (ShardedInit), renamed once the model's paths are known.
  void rename(std::string name, const std::vector<std::pair<std::string, std::vector<std::string>>>& slot_names);
  bool trainable() const { return trainable_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_; }
  int64_t shard_numel() const { return shard_numel_; }
  bool aliased() const { return aliased_; }
  // The codec of an encoded frozen shard (unit_hook.h; e.g. NF4), or null for fp32.
  const ShardCodec* codec() const { return codec_.get(); }
  // Bytes this rank keeps for its shard between uses (fp32: 4 per element; NF4: packed).
  int64_t shard_storage_bytes() const;
  Communicator& shard_group() const { return *shard_group_; }

  // The fp32 shard, brought back from the store first when offloaded (then counted as modified:
  // release_shard() writes it back); NF4: dequantised (release_shard() quantises it again).
  at::Tensor& shard();

  // --- offloaded shard (offload.params) ---
  // Moves the shard into `store` (a new slot) and drops it from memory. Only for a flat parameter
  // built with offloaded_shard = true, after init_from_params (or its adoption). `store` must
  // outlive this. With `keep_param_dtype_copy` (offload.keep_param_dtype_shard; param_dtype not
  // fp32) the shard cast to param_dtype stays resident: gathers read it instead of the store, and
  // every release of a modified shard casts the new values into it before writing them back.
  void attach_store(ShardStore* store, bool keep_param_dtype_copy = false);
  bool shard_offloaded() const { return store_ != nullptr; }
  bool offload_capable() const { return offloaded_shard_; }  // built with offloaded_shard = true
  bool shard_resident() const { return shard_.defined(); }
  // The param_dtype copy of an offloaded shard is resident (attach_store's keep_param_dtype_copy).
  bool has_param_dtype_copy() const { return lp_shard_.defined(); }
  const at::Tensor& packed_shard() const { return packed_; }  // NF4: codes and block maxima
  // The shard for reading: loaded when offloaded, not marked modified.
  const at::Tensor& shard_for_read() { return resident_shard(); }
  // The shard as a tensor the caller overwrites whole: when offloaded and not resident, a new
  // tensor of the shard's size (nothing read; contents undefined), counted as modified.
  at::Tensor& shard_for_overwrite();
  // The resident shard was changed through shard_for_read(): release_shard() writes it back.
  void mark_shard_modified() { shard_dirty_ = true; }
  // Starts reading the shard ahead (no-op when resident or not offloaded).
  void prefetch_shard();
  // Offloaded: writes the shard back if shard() handed it out since it was loaded, then drops it.
  // NF4: quantises it again if shard() handed it out (UsageError naming the unit for a value that
  // is not finite; the shard stays resident and modified), then drops it.
  // A failed write (IoError naming file and offset) keeps the shard resident and modified, so
  // nothing is lost and the next release retries. No-op when not offloaded or not resident.
  // With `retired`, the dropped tensor is moved there (for a caller whose side stream may still
  // read it).
  void release_shard(std::vector<at::Tensor>* retired = nullptr);
  // The store's slot file (NVME), for messages and tests; "" otherwise.
  std::string shard_file() const;
  // The fp32 gradient shard: undefined when there is none; a placeholder on the meta device while
  // it is offloaded and not resident (grad_for_read() brings it in).
  at::Tensor& grad_shard() { return grad_shard_; }
  const at::Tensor& full() const { return full_; }

  // --- offloaded gradient shard (offload.grads) ---
  // Keeps this trainable flat parameter's gradient shard in `store` (a new slot) from now on.
  // Before any gradient exists; `store` must outlive this.
  void attach_grad_store(ShardStore* store);
  bool grad_offloaded() const { return grad_store_ != nullptr; }
  // The gradient shard with its values: loaded (recorded factors applied) when offloaded; undefined
  // when there is none. Reading only: scale_grad changes it. IoError naming file and offset when
  // the stored gradient cannot be read or is corrupted.
  const at::Tensor& grad_for_read();
  void prefetch_grad();  // starts reading an offloaded gradient ahead of grad_for_read
  // Offloaded: writes a resident gradient that changed since it was stored, then drops it (the
  // placeholder stays). A failed write (IoError naming file and offset) keeps it resident and
  // changed. With `write_behind` the store writes it while the caller goes on (ShardStore::
  // save_async: the store holds the bytes until then; its flush() reports a failure). No-op
  // otherwise.
  void release_grad(bool write_behind = false);
  // Multiplies the gradient shard by `factor` (a one-element tensor, or a number): in place when
  // resident; recorded for its next load when offloaded. No-op without a gradient.
  void scale_grad(const at::Tensor& factor);
  void scale_grad(double factor);
  std::string grad_file() const;  // the store's file (NVME), for messages and tests; "" otherwise

  // --- parameters ---
  bool gathered() const;
  // Allocates the full buffer's storage if freed (from the current stream's pool) and starts the
  // all-gather into it; returns null when there is nothing to wait for: aliased, already
  // gathered, or a shard group of one rank, where the shard is cast into the full buffer on the
  // current stream. Elements gathered go to `elements`.
  std::shared_ptr<Work> start_gather(const std::string& tag, int64_t* elements);
  // Frees the full buffer's storage (no-op when aliased or already free).
  void free_full();

  // --- gradients ---
  // Allocates the flat gradient buffer (if absent; not zero-filled: only the gaps between
  // parameters and the padding are zeroed). A parameter whose gradient is in the buffer already
  // (accumulated over no_sync passes) gets .grad = its view, so autograd adds into it; the others
  // get an undefined .grad, so autograd hands over its own gradient tensor, which take_grad then
  // copies in: one copy per gradient instead of zero-filling the buffer and adding into it.
  void prepare_grads();
  // After autograd accumulated parameter `slot`'s gradient (its AccumulateGrad node ran): a first
  // value, autograd's tensor in .grad, is copied into the buffer and .grad becomes the buffer's
  // view; a value added into the view in place is there already.
  void take_grad(size_t slot);
  bool has_grad_buffer() const { return grad_buffer_.defined(); }
  // Reducing a gradient buffer runs in up to three stages so that nothing blocks the training
  // thread longer than it must:
  //   start_reduce    the reduce-scatter (average) over the shard group, or with a one-rank
  //                   shard group the all-reduce over the replicas (NO_SHARD); collective.
  //   advance_reduce  waits for the reduce-scatter, frees the gradient buffer, and starts the
  //                   all-reduce of the shard over the replicas (HYBRID_SHARD) without waiting.
  //                   Returns true while a replica all-reduce is in flight.
  //   finish_reduce   waits for whatever is in flight and adds the result into grad_shard().
  // Each stage runs the earlier ones that have not run. Elements communicated go to `elements`.
  // With `retired`, gradient buffers are moved there instead of being freed, for a caller that
  // ran this on a side stream and must keep them until that stream is done with them (their
  // bytes leave the kGradBuffers account either way).
  void start_reduce(const std::string& tag, int64_t* elements);
  bool advance_reduce(const std::string& tag, int64_t* elements, std::vector<at::Tensor>* retired = nullptr);
  void finish_reduce(const std::string& tag, int64_t* elements, std::vector<at::Tensor>* retired = nullptr);
  bool reduce_pending() const { return pending_out_.defined(); }
  // After a failed backward: waits for the collectives in flight (they were issued on every rank
  // alike), then drops their results and the gradient buffer, leaving grad_shard() as it was.
  // Never throws.
  void abandon_reduce() noexcept;
  // Drops the gradient shard (zero_grad with set_to_none).
  void drop_grad_shard();

  // Gathers the unsharded fp32 values (collective over the shard group): padded flat tensor.
  at::Tensor gather_values(const std::string& tag);

 private:
  void alloc_full_storage();
  const at::Tensor& resident_shard();  // loads an offloaded shard without marking it modified
  void point_params_at(const at::Tensor& flat);
  // Every trainable parameter's .grad becomes a placeholder on the meta device (see
  // drop_param_grads in flat_param.cpp): the engine keeps gradients in the flat shards.
  void drop_param_grads();
  void release_grad_buffer(std::vector<at::Tensor>* retired);
  // Zeroes the ranges of the parameters that got no gradient in this buffer (before reducing it).
  void zero_missing_grads();
  // (start, length) of every range of the flat layout outside the parameters, padding last.
  std::vector<std::pair<int64_t, int64_t>> gaps_between_slots() const;
  int64_t bytes(int64_t elements) const;     // fp32
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
  c10::Device device_{c10::kCPU};
  c10::ScalarType param_dtype_;
  c10::ScalarType reduce_dtype_;
  at::Tensor shard_;        // fp32 [S]: master values of this rank's shard (undefined while offloaded)
  bool offloaded_shard_ = false;
  ShardStore* store_ = nullptr;
  int store_slot_ = -1;
  bool shard_dirty_ = false;  // handed out by shard() since it was loaded
  at::Tensor lp_shard_;       // [S] in param_dtype: the resident copy of an offloaded shard, or undefined
  at::Tensor grad_shard_;   // fp32 [S], a meta placeholder (offloaded, not resident) or undefined
  struct GradScale {
    at::Tensor tensor;  // multiplied as g.mul(tensor.to(g.options())) when defined
    double value = 1;   // else as g.mul(value)
  };
  void apply_grad_scale(at::Tensor& g, const GradScale& s, bool in_place) const;
  void scale_grad(GradScale s);  // in place when resident, else recorded
  bool grad_resident() const { return grad_shard_.defined() && !grad_shard_.is_meta(); }
  void set_resident_grad(at::Tensor g);
  ShardStore* grad_store_ = nullptr;
  int grad_slot_ = -1;
  bool grad_stored_ = false;   // the store holds the gradient (times grad_scales_)
  bool grad_dirty_ = false;    // the resident gradient is not what the store holds times grad_scales_
  std::vector<GradScale> grad_scales_;
  at::Tensor grad_placeholder_;  // what grad_shard() holds while the gradient is stored only
  at::Tensor full_;         // [padded]: gathered values; storage freed while resharded
  bool full_allocated_ = false;
  at::Tensor grad_buffer_;  // [padded] or undefined
  at::Tensor pending_out_;  // the reduction's result in reduce_dtype: defined from start to finish
  int64_t staged_bytes_ = 0;  // of pending_out_, counted as comm buffers (0 when it is grad_buffer_)
  std::shared_ptr<Work> pending_rs_;
  std::shared_ptr<Work> pending_ar_;
  std::shared_ptr<const ShardCodec> codec_;
  at::Tensor packed_;           // NF4: this rank's packed shard (uint8)
  at::Tensor gathered_packed_;  // NF4: every rank's packed shard, held while full_ is
  void dequantize_gathered();   // NF4: gathered_packed_ into full_, rank by rank
};

}  // namespace zeroshard
